"""The memory half: the largest batch each policy fits, from batch-size search records.

Trials of ``axes.batch_size: max`` carry their search's settings (``record.search``). For
each table (host, device, image, setup) and policy, :func:`mxbench.matrix.search.walk` replays the
search over the trials' outcomes, exactly as ``mxbench run`` walked it: the answer comes from
the records alone, or the report says which trial is still missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mxbench import stats
from mxbench.matrix.params import BASELINE
from mxbench.matrix.search import Found, walk
from mxbench.records.record import Record
from mxbench.report.load import latest
from mxbench.report.tables import Table, group, make


@dataclass
class Fit:
    """One policy's search, replayed."""

    policy: str
    found: Found | None  # None: the search is not finished (``missing`` is its next trial)
    missing: int | None
    trials: list[Record]  # every trial's latest attempt, by batch size
    peak_bytes: int | None = None  # measured at the largest batch that fits
    peak_kind: str | None = None  # gpu (the framework's peak), cgroup, or rss

    @property
    def batch(self) -> int | None:
        return self.found.batch if self.found is not None else None


@dataclass
class Capacity:
    table: Table  # heading facts (host, device, image, setup) of the trials
    fits: dict[str, Fit] = field(default_factory=dict)

    def ratio(self, policy: str) -> float | None:
        """The policy's largest batch over float32's, when both searches found one."""
        base = self.fits.get(BASELINE)
        mine = self.fits.get(policy)
        if base is None or mine is None or not base.batch or not mine.batch:
            return None
        return mine.batch / base.batch


def trials(winners: list[Record]) -> list[Record]:
    return [r for r in winners if r.search is not None]


def build(winners: list[Record]) -> list[Capacity]:
    """One :class:`Capacity` per table that has batch-size search trials."""
    out = []
    for slots in group(trials(winners), by_device=False):
        cap = Capacity(make(slots))
        for policy in cap.table.policies:
            cap.fits[policy] = _replay(
                policy, {b: recs for (p, b), recs in slots.items() if p == policy}
            )
        out.append(cap)
    return out


def _replay(policy: str, by_batch: dict[int, list[Record]]) -> Fit:
    last = {b: latest(recs) for b, recs in by_batch.items()}
    config = latest(list(last.values())).search
    assert config is not None  # only trials are grouped here

    def outcome(batch: int) -> tuple[str, str | None] | None:
        rec = last.get(batch)
        return (rec.status, rec.error) if rec is not None else None

    step = walk(config, outcome)
    fit = Fit(
        policy,
        step if isinstance(step, Found) else None,
        None if isinstance(step, Found) else step,
        [last[b] for b in sorted(last)],
    )
    if fit.batch is not None:
        fit.peak_bytes, fit.peak_kind = peak_bytes(last[fit.batch])
    return fit


def peak_bytes(rec: Record) -> tuple[int | None, str | None]:
    """The peak memory that counts against the limit: the framework's GPU peak, else the
    memory cgroup's (a memory limit) as the bench read it right after the training (an
    older record: the engine's, over the whole process), else the process's peak RSS."""
    m = rec.metrics
    cgroup = rec.run.get("cgroup_peak_bytes")
    if m.peak_memory_kind in ("gpu", "cgroup") and m.peak_memory_bytes:
        return m.peak_memory_bytes, m.peak_memory_kind
    if isinstance(cgroup, int):
        return cgroup, "cgroup"
    if m.peak_memory_bytes:
        return m.peak_memory_bytes, "rss"
    return None, None


def _size(n: int | None) -> str:
    return f"{n / 2**30:.2f} GiB" if n else "-"


def rows(c: Capacity) -> tuple[list[str], list[list[str]]]:
    headers = [
        "policy",
        "largest batch",
        f"vs {BASELINE}",
        "peak memory there",
        "smallest OOM",
        "trials",
        "search",
    ]
    out = []
    for policy, fit in c.fits.items():
        found = fit.found
        ratio = c.ratio(policy)
        kind = f" ({fit.peak_kind})" if fit.peak_kind else ""
        state = (
            f"incomplete: batch {fit.missing} next (mxbench run --resume)"
            if found is None
            else found.sentence()
        )
        out.append(
            [
                policy,
                str(fit.batch) if fit.batch is not None else "-",
                f"{stats.figure(ratio)}x" if ratio is not None and policy != BASELINE else "",
                _size(fit.peak_bytes) + (kind if fit.peak_bytes else ""),
                str(found.oom_at) if found is not None and found.oom_at else "-",
                str(len(fit.trials)),
                state,
            ]
        )
    return headers, out


# A policy's largest batch at least this many times float32's: mixed precision "lets this
# device train larger batches" (above 1 and below it: "fits only a little more").
LARGER = 1.3


def diagnosis(c: Capacity) -> str | None:
    """What mixed precision does to the largest batch here, in one sentence."""
    base = c.fits.get(BASELINE)
    if base is None or not base.batch:
        return None
    said = []
    for policy, fit in c.fits.items():
        ratio = c.ratio(policy)
        if policy == BASELINE or ratio is None or fit.batch is None:
            continue
        said.append(f"{policy} {fit.batch} ({stats.figure(ratio)}x)")
    if not said:
        return None
    best = max((c.ratio(p) or 0.0) for p in c.fits if p != BASELINE)
    where = "GPU" if c.table.device.kind == "gpu" else "CPU"
    if best >= LARGER:
        verdict = (
            "mixed precision lets this device train larger batches: activations are kept in "
            "16 bits, while the float32 master weights, optimizer state and framework memory "
            "are not halved, so the gain stays below 2x"
        )
    elif best > 1:  # a larger batch fit, if a little: never "does not fit a larger batch"
        verdict = (
            "mixed precision fits only a little more: most of this process's memory is not "
            "16-bit activations (framework, weights, workspace)"
        )
    else:
        verdict = (
            f"mixed precision does not fit a larger batch on this {where}: the 16-bit "
            "activations are offset by float32 copies and conversion buffers"
        )
    return (
        f"Largest batch: {BASELINE} {base.batch}, "
        + ", ".join(said)
        + f": {verdict}. "
        + counted(c)
    )


# What "peak memory there" counts, by the kind of peak (Metrics.peak_memory_kind).
PEAK_WORDS = {
    "gpu": "the framework's peak on the GPU",
    "cgroup": "the memory cgroup's peak, what the memory limit counts (page cache included)",
    "rss": "the process's peak resident memory, the framework's own libraries included "
    "(about 0.5-1 GB for TensorFlow)",
}


def counted(c: Capacity) -> str:
    """What the search's trials ran and what their peak memory counts, in words."""
    kinds = sorted({f.peak_kind for f in c.fits.values() if f.peak_kind})
    trials = [r for f in c.fits.values() for r in f.trials]
    bare = trials and all(r.params.profile == "off" and r.params.check == "off" for r in trials)
    ran = (
        "Each trial trained only (no profiled window, no one-step check: neither may decide "
        "what fits)"
        if bare
        else "Some trials also ran the profiled window or the one-step check (older "
        "records): their memory, not the training's, may have decided an OOM"
    )
    peaks = "; ".join(f"{k}: {PEAK_WORDS[k]}" for k in kinds if k in PEAK_WORDS)
    return f"{ran}. Peak memory is read right after the training" + (
        f" ({peaks})." if peaks else "."
    )
