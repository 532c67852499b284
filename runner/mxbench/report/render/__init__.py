"""The report's renderers of one built document: GitHub ``markdown``, a self-contained
``html`` page (with ``plot``'s PNGs), ``terminal`` (rich) and ``export`` (JSON)."""
