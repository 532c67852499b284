"""The result record and where it goes: the type (:mod:`.record`) and its parts
(:mod:`.part`, :mod:`.pairing`, :mod:`.distribution`, :mod:`.inference`, :mod:`.profile`),
its JSON lines (:mod:`.codec`), the append-only store (:mod:`.store`), the per-process
summary a comparison judges (:mod:`.summary`) and ``docs/record.md`` made from the type
(:mod:`.doc`, ``python -m mxbench.records.doc``).

Empty on purpose: importing one module of the package imports nothing else.
"""
