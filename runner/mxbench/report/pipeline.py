"""The markdown report of a large fleet, made on several processes, split by host.

Every cell and every table belongs to one host, so hosts can be dealt out to workers: each
reads, merges, builds and renders the tables of its own hosts, and the parent puts the
sections in order. Three ways to deal them, the first that fits:

1. by file: mxbench writes one results file per host (``results/<host>.jsonl``), so whole
   files go to workers by name (the same name in two directories to the same worker),
   when that balances the bytes. Nothing is read twice.
2. by byte range: a big file written host by host (one file for a whole fleet) is cut
   where the host changes. Skipped when the lines of different hosts are interleaved.
3. by host shard (:func:`mxbench.report.load.shard_of`): every worker scans every line for
   its host and parses in full only its own hosts' lines. Always valid, for any layout;
   the scan costs each worker about a quarter of a second per 100 MiB.

1 and 2 are valid only if no host turns up in two workers' parts, which is checked
afterwards (then 3 is used). The output is byte for byte what one process makes. Small
inputs are made in this process: a worker costs a fork and copying results back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import BinaryIO, TypeVar

from mxbench.report import fanout, load, render, tables

# Below this much JSONL a second process saves less than it costs.
MIN_BYTES_PER_JOB = 8 * 2**20
# Split by file only when no worker gets more than this times its share of the bytes.
BALANCED = 1.25

T = TypeVar("T")


@dataclass
class Part:
    """What one worker made: its counts and warnings, its hosts, its sections in order."""

    loaded: load.Loaded  # winners and attempts left out: they stay in the worker
    hosts: set[str]
    sections: list[tuple[tuple[str, ...], render.Section]]


def make_part(
    files: list[Path],
    shard: tuple[int, int] | None = None,
    pieces: list[load.Piece] | None = None,
) -> Part:
    loaded = load.load(files, shard=shard, pieces=pieces)
    sections = [(order, render.section(tables.make(slots))) for order, slots in
                tables.group(loaded.winners)]  # fmt: skip
    hosts = {rec["host"] for rec in loaded.winners}
    loaded.winners, loaded.attempts = [], {}
    return Part(loaded, hosts, sections)


def split(files: list[Path], jobs: int, sizes: dict[Path, int]) -> list[list[Path]]:
    """Files in at most ``jobs`` groups of about equal size, same-named files together,
    each group in the order the files were given."""
    names: dict[str, int] = {}
    for f in files:
        names[f.name] = names.get(f.name, 0) + sizes[f]
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
    sizes = {f: _size(f) for f in files}
    total = sum(sizes.values())
    jobs = fanout.default_jobs() if jobs is None else jobs
    jobs = max(1, min(jobs, total // max(1, MIN_BYTES_PER_JOB)))
    if jobs == 1:
        return _merge(files, [make_part(files)])
    parts = None
    groups = split(files, jobs, sizes)
    if len(groups) == jobs and max(sum(sizes[f] for f in g) for g in groups) <= (
        BALANCED * total / jobs
    ):
        parts = _valid(_run(make_part, groups))
    elif (pieces := host_pieces(files, jobs, sizes)) is not None:
        parts = _valid(_run(partial(make_part, [], None), pieces))
    if parts is None:
        parts = _run(partial(make_part, files), [(k, jobs) for k in range(jobs)])
    return _merge(files, parts)


def host_pieces(
    files: list[Path], jobs: int, sizes: dict[Path, int]
) -> list[list[load.Piece]] | None:
    """The files cut into ``jobs`` runs of whole lines, each cut where the host changes:
    for files written host by host (one big file, say). None when the lines of different
    hosts are interleaved, which only host shards can split."""
    total = sum(sizes[f] for f in files)
    targets = [total * k // jobs for k in range(1, jobs)]
    runs: list[list[load.Piece]] = [[] for _ in range(jobs)]
    k, base = 0, 0
    for f in files:
        size, start = sizes[f], 0
        with open(f, "rb") as fh:
            while k < len(targets) and targets[k] < base + size:
                cut = _host_change(fh, max(targets[k] - base, start))
                if cut is None:
                    return None
                if cut > start:
                    runs[k].append((f, start, cut))
                    start = cut
                k += 1
        if start < size:
            runs[k].append((f, start, -1))
        base += size
    return [r for r in runs if r]


# Lines looked at after a cut: a file written host by host changes host a few times in
# them; one with interleaved hosts changes at almost every line.
_WINDOW = 64
_MAX_CHANGES = 16
_MAX_RUN = 1_000_000  # lines of one host before cutting anyway (the check catches it)


def _host_change(fh: BinaryIO, pos: int) -> int | None:
    """The start of the first line after ``pos`` whose host differs from the one before."""
    fh.seek(pos)
    if pos:
        fh.readline()  # to the next line start
    start = fh.tell()
    line = fh.readline()
    if not line:
        return start
    host = load.host_of(line)
    for _ in range(_MAX_RUN):
        start = fh.tell()
        line = fh.readline()
        if not line:
            return start
        if load.host_of(line) != host:
            return start if _changes(fh, start) <= _MAX_CHANGES else None
    return start


def _changes(fh: BinaryIO, start: int) -> int:
    """Host changes between consecutive lines among the _WINDOW lines from ``start``."""
    fh.seek(start)
    changes, host = 0, load.host_of(fh.readline())
    for _ in range(_WINDOW - 1):
        line = fh.readline()
        if not line:
            break
        other = load.host_of(line)
        changes += other != host
        host = other
    return changes


def _valid(parts: list[Part]) -> list[Part] | None:
    """The parts, unless a host turned up in two of them (then the split was not valid)."""
    hosts = [p.hosts for p in parts]
    return parts if sum(map(len, hosts)) == len(set().union(*hosts)) else None


def _run(fn: Callable[[T], Part], items: list[T]) -> list[Part]:
    return fanout.fan_out(fn, items, len(items))


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
