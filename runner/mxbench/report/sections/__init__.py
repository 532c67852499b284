"""The report's sections beside the speed tables, each an answer of its own: ``answers``
(one line per comparison), ``capacity`` (largest batch), ``convergence``, ``inference``
(serving), ``training`` (to the same accuracy), ``scaling`` (with ``scaling_reference`` and
``throughput``) and ``why`` (where the time goes, energy and cost)."""
