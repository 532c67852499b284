"""The markdown report of a large fleet, made on several processes, split by host.

Every cell and every table belongs to one host, and mxbench writes one results file per
host (``results/<host>.jsonl``). So the result files are dealt out to workers by file name
(the same name in two directories goes to the same worker): each worker reads, merges,
builds and renders the tables of its own hosts, and the parent puts the sections in order.
Where one host turns up in two workers' files (hand-made files), that split is not valid
and the report is made again in one process; the output never depends on the split.

Small inputs are made in this process: a worker costs a fork and copying results back.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mxbench.report import fanout, load, render, tables

# Below this much JSONL a second process saves less than it costs.
MIN_BYTES_PER_JOB = 8 * 2**20


@dataclass
class Part:
    """What one worker made: its counts and warnings, its hosts, its sections in order."""

    loaded: load.Loaded  # winners and attempts left out: they stay in the worker
    hosts: set[str]
    sections: list[tuple[tuple[str, ...], render.Section]]


def make_part(files: list[Path]) -> Part:
    loaded = load.load(files)
    sections = [(order, render.section(tables.make(slots))) for order, slots in
                tables.group(loaded.winners)]  # fmt: skip
    hosts = {rec["host"] for rec in loaded.winners}
    loaded.winners, loaded.attempts = [], {}
    return Part(loaded, hosts, sections)


def split(files: list[Path], jobs: int) -> list[list[Path]]:
    """Files in at most ``jobs`` groups of about equal size, same-named files together,
    each group in the order the files were given."""
    names: dict[str, int] = {}
    for f in files:
        names[f.name] = names.get(f.name, 0) + _size(f)
    loads = [0] * jobs
    home: dict[str, int] = {}
    for name in sorted(names, key=lambda n: -names[n]):  # largest first, to the lightest
        i = loads.index(min(loads))
        home[name] = i
        loads[i] += names[name]
    groups: list[list[Path]] = [[] for _ in range(jobs)]
    for f in files:
        groups[home[f.name]].append(f)
    return [g for g in groups if g]


def markdown(sources: list[Path], jobs: int | None = None) -> tuple[load.Loaded, str]:
    """The report's counts and warnings (winners left out), and the markdown text."""
    files = load.source_files(sources)
    jobs = fanout.default_jobs() if jobs is None else jobs
    total = sum(_size(f) for f in files)
    jobs = max(1, min(jobs, total // max(1, MIN_BYTES_PER_JOB), len({f.name for f in files})))
    parts = fanout.fan_out(make_part, split(files, jobs), jobs, min_per_job=1, parent_works=False)
    hosts = [p.hosts for p in parts]
    if sum(map(len, hosts)) != len(set().union(*hosts)):  # a host in two workers' files
        parts = [make_part(files)]
    return _merge(files, parts)


def _merge(files: list[Path], parts: list[Part]) -> tuple[load.Loaded, str]:
    order = {f: i for i, f in reversed(list(enumerate(files)))}
    merged = load.Loaded(winners=[], attempts={}, files=files)
    for p in parts:
        merged.records += p.loaded.records
        merged.cells += p.loaded.cells
        merged.bad += p.loaded.bad
    merged.bad.sort(key=lambda b: (order.get(b.path, len(files)), b.lineno))
    sections = sorted((s for p in parts for s in p.sections), key=lambda pair: pair[0])
    return merged, render.markdown(merged, [s for _, s in sections])


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
