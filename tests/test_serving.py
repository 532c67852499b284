"""Serving cells (issue 37, Step 22): ``mode: infer`` in the matrix and the cell key, latency
percentiles that say what they rest on, the gate against float32, and the report's serving
section in every format. The bench runs on real TensorFlow, JAX and PyTorch
(``test_serving_bench.py``); here the rules, with known numbers, and the records' path."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mxbench import stats
from mxbench.cells.cell import expand, pair_up
from mxbench.errors import UsageError
from mxbench.matrix import serving
from mxbench.matrix.file import parse_matrix
from mxbench.matrix.params import Params
from mxbench.records.codec import decode
from mxbench.report import document, load, tables
from mxbench.report.sections import answers, inference
from mxbench.stats import latency
from report_records import rec, write


def _binomial_mass(n: int, q: float, low: int, high: int) -> float:
    """P(low <= B <= high), B ~ Bin(n, q), by math.comb (an independent computation)."""
    return sum(math.comb(n, k) * q**k * (1 - q) ** (n - k) for k in range(low, high + 1))


# ---- the percentile rule, against known numbers ------------------------------------------


@pytest.mark.parametrize(
    ("q", "level", "n"),
    [
        (0.99, 0.99, 528),  # two-sided 99%: 0.99^528 <= 0.005 < 0.99^527
        (0.99, 0.98, 459),  # a tail of 1% per side: the one-sided 99% bound's 459 queries
        (0.99, 0.95, 368),
        (0.9, 0.95, 36),
        (0.5, 0.95, 6),  # 0.5^6 = 1/64 <= 0.025 < 1/32
    ],
)
def test_the_queries_a_percentile_needs_are_the_binomial_rule(
    q: float, level: float, n: int
) -> None:
    assert latency.min_queries(q, level) == n
    tail = (1 - level) / 2
    assert max(q, 1 - q) ** n <= tail < max(q, 1 - q) ** (n - 1)
    assert latency.bounds(n - 1, q, level) is None
    assert latency.bounds(n, q, level) is not None


def test_mlperf_query_counts_are_the_published_ones() -> None:
    # MLPerf Inference: p90 at 99% confidence 24,576 queries, p99 270,336 (issue 37)
    assert latency.mlperf_queries(0.9) == 24_576
    assert latency.mlperf_queries(0.99) == 270_336


def test_the_median_interval_of_100_is_the_textbook_one() -> None:
    # n = 100, 95%: the order statistics 40 and 61 (tables of the sign-test interval)
    assert latency.bounds(100, 0.5, 0.95) == (40, 61)


@pytest.mark.parametrize(("n", "q"), [(100, 0.5), (400, 0.9), (600, 0.99), (1000, 0.99)])
def test_the_interval_holds_its_level_and_no_narrower_one_does(n: int, q: float) -> None:
    found = latency.bounds(n, q, 0.95)
    assert found is not None
    low, high = found
    # coverage P(low <= B <= high - 1) at least 95%, each tail at most 2.5%
    assert _binomial_mass(n, q, low, high - 1) >= 0.95
    assert _binomial_mass(n, q, 0, low - 1) <= 0.025
    assert _binomial_mass(n, q, high, n) <= 0.025
    # one rank tighter on either side breaks its tail
    assert _binomial_mass(n, q, 0, low) > 0.025
    assert _binomial_mass(n, q, high - 1, n) > 0.025


def test_a_percentile_from_known_times() -> None:
    times = [float(t) for t in range(1000, 0, -1)]  # 1..1000 ms, any order
    p50, p90, p99 = latency.percentiles(times)
    assert (p50.value, p90.value, p99.value) == (500.0, 900.0, 990.0)
    assert p99.n == 1000 and p99.supported
    low, high = latency.bounds(1000, 0.99, 0.95) or (0, 0)
    assert (p99.low, p99.high) == (float(low), float(high))
    assert p99.low is not None and p99.high is not None and p99.low < 990 < p99.high


def test_too_few_calls_give_the_calls_needed_not_a_figure() -> None:
    p50, p90, p99 = latency.percentiles([1.0 + i / 100 for i in range(100)])
    assert p50.supported and p90.supported and not p99.supported
    assert p99.value is None and p99.text() == "needs 368 queries (n=100)"
    assert latency.percentile([], 0.5).text() == "needs 6 queries (n=0)"


# ---- the matrix: mode is an axis, keys of training cells unchanged --------------------


MATRIX = """
version: 1
benchmark: {{image_size: 32, steps: 50, repeats: 1{extra}}}
axes: {{policy: [float32, mixed_bfloat16], batch_size: [1, 8]{axes}}}
hosts:
  - {{name: here, engine: local}}
"""


def _matrix(axes: str = "", extra: str = "") -> Any:
    return parse_matrix(MATRIX.format(axes=axes, extra=extra))


def test_mode_is_an_axis_and_a_training_cell_keeps_its_key() -> None:
    before = expand(_matrix())
    both = expand(_matrix(", mode: [train, infer], quantize: [none, int8]"))
    train = [c for c in both if c.params.mode == "train"]
    infer = [c for c in both if c.params.mode == "infer"]
    # quantize applies to infer cells only: no training duplicates of it
    assert len(train) == len(before) == 4 and len(infer) == 8
    assert {c.key for c in train} == {c.key for c in before}
    assert len({c.key for c in both}) == 12
    # serving cells run one policy per process (no paired design)
    processes = pair_up(both)
    assert all(not c.partners for c in processes if c.params.mode == "infer")
    assert any(c.partners for c in processes if c.params.mode == "train")


def test_an_old_record_reads_as_a_training_cell() -> None:
    old = rec(policy="float32", batch=8)
    assert "mode" not in old["params"]
    r = decode(json.dumps(old))
    assert r.params.mode == "train" and r.params.call == "direct" and r.params.quantize == "none"
    assert "mode" not in Params().key_fields()
    assert Params(mode="infer").key_fields()["mode"] == "infer"


@pytest.mark.parametrize(
    ("axes", "extra", "where", "says"),
    [
        (", mode: [infer]", ", epochs: 2, data: /tmp", "epochs", "a training run"),
        (", quantize: [int8]", "", "quantize", "applies to infer cells only"),
        (", call: [predict]", "", "call", "applies to infer cells only"),
        (", mode: [infer]", ", batch_size: max", "batch_size", "max searches"),
        (", mode: [infer], devices: [1, 2]", "", "devices", "one device in one process"),
    ],
)
def test_the_matrix_refuses_what_a_serving_cell_cannot_be(
    axes: str, extra: str, where: str, says: str
) -> None:
    if "batch_size: max" in extra:
        text = MATRIX.format(axes=axes, extra="").replace("batch_size: [1, 8]", "batch_size: [max]")
    else:
        text = MATRIX.format(axes=axes, extra=extra)
    with pytest.raises(UsageError) as caught:
        parse_matrix(text)
    assert where in str(caught.value) and says in str(caught.value), str(caught.value)


def test_the_rule_behind_both_checks() -> None:
    assert serving.problem({"mode": ["infer"], "data": ["/some/folder"]}) == (
        "data",
        "infer cells with their build's weights take synthetic inputs (data: synthetic); a "
        "data folder is the gate's with weights: trained or a weights file",
    )
    assert serving.problem({"mode": ["train", "infer"], "quantize": ["none", "int8"]}) is None
    # a training cell measures the serving-only parameters at their defaults
    assert serving.cell_values({"mode": "train", "quantize": "int8"})["quantize"] == "none"
    assert serving.cell_values({"mode": "infer", "quantize": "int8"})["quantize"] == "int8"


def test_bench_refuses_a_serving_option_on_a_training_cell() -> None:
    from mxbench.bench.params import validate

    with pytest.raises(UsageError, match="--quantize: int8: applies to infer cells only"):
        validate(Params(quantize="int8", image_size=32))
    assert validate(Params(mode="infer", quantize="int8", image_size=32)).quantize == "int8"


# ---- the gate and the report's section ------------------------------------------------


CPU = {"kind": "cpu", "name": "Test CPU"}


def served(
    policy: str,
    calls: list[float],
    agreement: float | None = None,
    cosine: float = 0.9999,
    quantize: str = "none",
    repeat: int | None = None,
    host: str = "h1",
    call: str = "direct",
) -> dict[str, Any]:
    """A serving record: ``calls`` its call times (ms), the gate when ``agreement`` is given."""
    from mxbench.cells.cell import cell_key

    params = {
        **{"model": "blog-cnn", "policy": policy, "batch_size": 1, "image_size": 32},
        **{"mode": "infer", "quantize": quantize, "steps": len(calls), "repeat": repeat},
        "call": call,
    }
    ordered = sorted(calls)
    passed = agreement is not None and agreement >= 0.99 and cosine >= 0.99
    gate = {"ran": True, "top1_agreement": agreement, "cosine": cosine, "passed": passed}
    out = rec(host=host, policy=policy, batch=1, device=CPU)
    out["params"] = params
    out["cell"] = cell_key(host, None, None, Params(**params))
    out["metrics"] = {
        "step_ms": {"median": ordered[len(ordered) // 2], "n": len(calls), "samples": calls},
        "images_per_s": 1000.0 / (sum(calls) / len(calls)),
    }
    out["inference"] = {"call": call, "batch": 1, "calls": len(calls)}
    if agreement is not None:
        out["inference"]["gate"] = gate
    return out


def _calls(ms: float, n: int = 400, spread: float = 0.2) -> list[float]:
    return [ms * (1 + spread * ((i * 37) % 100) / 100) for i in range(n)]


def _doc(tmp_path: Path, records: list[dict[str, Any]]) -> document.Document:
    write(tmp_path / "r.jsonl", records)
    loaded = load.load([tmp_path])
    return document.build(loaded, tables.build(loaded.winners))


def test_the_gate_strikes_a_speedup_whose_outputs_disagree(tmp_path: Path) -> None:
    records = [
        served("float32", _calls(10.0)),
        served("mixed_bfloat16", _calls(5.0), agreement=0.9),  # twice as fast, wrong answers
        served("mixed_float16", _calls(8.0), agreement=0.995),
        served("float32", _calls(4.0), agreement=0.999, cosine=0.95, quantize="int8"),
        served("float16", _calls(6.0)),  # no gate record: no quality figure
    ]
    doc = _doc(tmp_path, records)
    (section,) = doc.inference
    by = {row[0]: row for row in section.rows}
    gate = section.headers.index("gate")
    assert by["float32"][gate] == "float32 (reference)"
    assert by["mixed_bfloat16"][gate] == ("struck: top-1 agreement with float32 90.00% (below 99%)")
    assert by["mixed_float16"][gate] == "pass (synthetic agreement)"
    assert "output cosine with float32 0.9500 (below 0.99)" in by["float32 + int8"][gate]
    assert "no quality figure against float32 (no gate record)" in by["float16"][gate]
    said = inference.lines(doc.loaded.winners)
    bf16 = next(s for s in said if "mixed_bfloat16" in s)
    assert "speedup struck" in bf16 and "faster" not in bf16
    f16 = next(s for s in said if "mixed_float16" in s)
    assert "1.25× the speed of float32" in f16 and "too few processes" in f16  # one each
    # and training's answers say nothing of serving cells
    assert answers.lines(doc.tables) == [] and doc.grids == []


def _nearest(times: list[float], q: float) -> float:
    return sorted(times)[max(1, math.ceil(q * len(times))) - 1]


def _one_process(times: list[float], q: float) -> tuple[float, float, float] | int:
    """A process's ``q`` percentile with its 95% interval, computed here (scipy's binomial):
    the ranks of Bin(m, q), m the calls' effective number for it (the lag-1 autocorrelation
    of "at most the percentile", clipped to [0, 0.95]), scaled to the n calls; where m
    calls cannot hold it, the calls it needs (an int)."""
    import numpy as np
    from scipy.stats import binom

    n, cut = len(times), _nearest(times, q)
    ind = np.array([t <= cut for t in times], dtype=float)
    c = ind - ind.mean()
    rho = min(max(float((c[1:] * c[:-1]).sum() / (c * c).sum()), 0.0), 0.95)
    exact = n * (1 - rho) / (1 + rho)
    m = math.floor(exact + 1e-9)
    cdf = binom.cdf(np.arange(m), m, q)
    lows = [k + 1 for k in range(m) if cdf[k] <= 0.025]
    highs = [k + 1 for k in range(m) if 1 - cdf[k] <= 0.025]
    if not lows or not highs:
        least = next(k for k in range(1, 10_000) if max(q, 1 - q) ** k <= 0.025)
        return max(least, math.ceil(least * n / exact - 1e-9))
    low, high = max(lows), min(highs)
    if m != n:
        low, high = max(1, math.floor(low * n / m)), min(n, math.ceil(high * n / m))
    ordered = sorted(times)
    return cut, ordered[low - 1], ordered[high - 1]


def _across(processes: list[list[float]], q: float) -> tuple[float, float, float]:
    """Several processes' ``q`` percentile, computed here: the geometric mean of theirs,
    Student's t (k - 1 df) over their logs, floored at their own intervals' spread."""
    from scipy.stats import norm, t

    own = [_one_process(x, q) for x in processes]
    assert all(isinstance(x, tuple) for x in own)
    logs = [math.log(x[0]) for x in own]  # type: ignore[index]
    floor = sum(((math.log(x[2]) - math.log(x[1])) / (2 * norm.ppf(0.975))) ** 2
                for x in own) / len(own)  # type: ignore[index]  # fmt: skip
    k, mean = len(logs), sum(logs) / len(logs)
    spread = max(sum((x - mean) ** 2 for x in logs) / (k - 1), floor)
    half = t.ppf(0.975, k - 1) * math.sqrt(spread / k)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def test_percentiles_are_each_process_s_with_an_interval_over_processes(tmp_path: Path) -> None:
    """Two processes of float32 whose calls sit at 10 ms and 12 ms: pooled as independent
    calls their p50 read 11.xx with an interval of a few hundredths (n=400), as if one process
    had made all 400 calls. Each process's own, then Student's t over the two: the interval
    the processes' difference asks for, computed here from the raw calls."""
    calls = {
        ("float32", 0): _calls(10.0, n=200), ("float32", 1): _calls(12.0, n=200),
        ("mixed_bfloat16", 0): _calls(5.0, n=100), ("mixed_bfloat16", 1): _calls(6.0, n=100),
    }  # fmt: skip
    records = [served(policy, times, agreement=None if policy == "float32" else 1.0, repeat=k)
               for (policy, k), times in calls.items()]  # fmt: skip
    (section,) = _doc(tmp_path, records).inference
    base, bf16 = section.rows
    for row, policy in ((base, "float32"), (bf16, "mixed_bfloat16")):
        value, low, high = _across([calls[policy, 0], calls[policy, 1]], 0.5)
        n = len(calls[policy, 0])
        assert row[1] == f"{value:.2f} [{low:.2f}–{high:.2f}] (n=2×{n})", row[1]
    value, low, high = _across([calls["float32", 0], calls["float32", 1]], 0.9)
    assert base[2] == f"{value:.2f} [{low:.2f}–{high:.2f}] (n=2×200)"
    assert high / low > 1.5  # 10 ms against 12 ms: one degree of freedom, and it says so
    # p99 of 200 calls a process: no order statistic holds it, pooled to 400 or not
    assert base[3] == f"needs {_one_process(calls['float32', 0], 0.99)} queries a process (n=2×200)"
    assert bf16[3] == "needs 368 queries a process (n=2×100)"
    rung = section.rungs[1]
    assert rung.ratio is not None and rung.ratio.judged  # two processes per side: a verdict
    assert 1.9 < rung.ratio.value < 2.1
    (p50,) = [p for p in json.loads(document.render(_doc(tmp_path, records), "json"))[
        "inference"][0]["precisions"][0]["percentiles"] if p["q"] == 0.5]  # fmt: skip
    assert (p50["processes"], p50["over"], p50["n"]) == (2, "processes", 400)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_latency_intervals_hold_their_level_with_process_effects_and_drift(k: int) -> None:
    """Calibration: k processes of 200 calls, each process offset by SD 0.07 in the log (the
    drift study's spread between processes) and its calls autocorrelated (AR(1), rho 0.6,
    SD 0.1 in the log). The truth, a typical process's p50 and p90, is the stationary
    distribution's (exp(z_q · 0.1) x 10 ms). The intervals over processes hold it in at least
    93% of 300 draws; the calls pooled as independent held it in under 60%."""
    import random
    from statistics import NormalDist

    rng = random.Random(k)
    truth = {q: 10.0 * math.exp(NormalDist().inv_cdf(q) * 0.1) for q in (0.5, 0.9)}
    held = dict.fromkeys(truth, 0)
    pooled = dict.fromkeys(truth, 0)
    for _ in range(300):
        processes = []
        for _ in range(k):
            offset, x, calls = rng.gauss(0, 0.07), rng.gauss(0, 0.1), []
            for _ in range(200):
                x = 0.6 * x + rng.gauss(0, 0.1 * math.sqrt(1 - 0.36))
                calls.append(10.0 * math.exp(offset + x))
            processes.append(calls)
        for q, true in truth.items():
            found = latency.across(processes, q)
            assert found.low is not None and found.high is not None
            held[q] += found.low <= true <= found.high
            every = latency.percentile([t for c in processes for t in c], q)
            pooled[q] += (every.low or 0) <= true <= (every.high or 0)
    assert min(held.values()) >= 0.93 * 300, held
    assert max(pooled.values()) < 0.6 * 300, pooled


def test_one_process_s_interval_counts_calls_that_are_slow_together(tmp_path: Path) -> None:
    """One process whose calls drift (a slow stretch, then a fast one): neighbouring calls
    agree, so they are worth fewer than their number, and the interval widens by what the
    calls' own autocorrelation says, computed here; a slow stretch of the last 10% leaves
    p90 needing more calls than 300. Calls without such runs keep the textbook interval of
    independent calls."""
    drift = [10.0 + 2.0 * (i < 150) + 0.5 * ((i * 37) % 100) / 100 for i in range(300)]
    flat = _calls(10.0, n=300)
    (section,) = _doc(tmp_path, [served("float32", drift)]).inference
    (row,) = section.rows
    value, low, high = _one_process(drift, 0.5)  # type: ignore[misc]
    assert row[1] == f"{value:.2f} [{low:.2f}–{high:.2f}] (n=300)"
    textbook = latency.percentile(drift, 0.5)
    assert (textbook.high or 0) - (textbook.low or 0) < high - low  # wider than independent
    tail = [10.0 + 2.0 * (i >= 270) + 0.5 * ((i * 37) % 100) / 100 for i in range(300)]
    (section,) = _doc(tmp_path, [served("float32", tail)]).inference
    needs = _one_process(tail, 0.9)
    assert isinstance(needs, int) and needs > 300
    assert section.rows[0][2] == f"needs {needs} queries (n=300)"
    assert latency.percentile(tail, 0.9).supported  # as independent calls, 300 would do
    (section,) = _doc(tmp_path, [served("float32", flat)]).inference
    (row,) = section.rows
    textbook = latency.percentile(flat, 0.5)
    assert row[1] == f"{textbook.value:.2f} [{textbook.low:.2f}–{textbook.high:.2f}] (n=300)"
    assert _one_process(flat, 0.5) == (textbook.value, textbook.low, textbook.high)


def test_the_speedup_is_the_ratio_of_the_printed_p50s(tmp_path: Path) -> None:
    """float32's processes at 10 and 14 ms, mixed_bfloat16's at 5 and 7 ms with twice the
    spread of calls: the speedup is float32's p50 as printed over the policy's (each the
    geometric mean of the processes' own p50s, computed here), with a verdict over the
    processes."""
    calls = {
        ("float32", 0): _calls(10.0, n=200), ("float32", 1): _calls(14.0, n=200),
        ("mixed_bfloat16", 0): _calls(5.0, n=200, spread=0.5),
        ("mixed_bfloat16", 1): _calls(7.0, n=200, spread=0.5),
    }  # fmt: skip
    records = [served(policy, times, agreement=None if policy == "float32" else 1.0, repeat=k)
               for (policy, k), times in calls.items()]  # fmt: skip
    (section,) = _doc(tmp_path, records).inference
    p50 = {policy: math.sqrt(_nearest(calls[policy, 0], 0.5) * _nearest(calls[policy, 1], 0.5))
           for policy in ("float32", "mixed_bfloat16")}  # fmt: skip
    rung = section.rungs[1]
    assert rung.ratio is not None and rung.ratio.judged
    assert rung.ratio.value == pytest.approx(p50["float32"] / p50["mixed_bfloat16"], rel=1e-9)
    base, bf16 = section.rows
    printed = float(base[1].split()[0]) / float(bf16[1].split()[0])
    assert float(bf16[5].split()[0]) == pytest.approx(printed, abs=0.006)


def test_the_serving_section_shows_in_every_format(tmp_path: Path) -> None:
    records = [
        served("float32", _calls(10.0)),
        served("mixed_bfloat16", _calls(5.0), agreement=0.9),
        rec(policy="float32", batch=8, device=CPU),  # a training cell beside them
        rec(policy="mixed_bfloat16", batch=8, device=CPU, median=50.0),
    ]
    doc = _doc(tmp_path, records)
    assert len(doc.tables) == 1 and len(doc.inference) == 1
    title = doc.inference[0].title
    struck = "top-1 agreement with float32 90.00% (below 99%)"
    for fmt in ("markdown", "html", "terminal"):
        out = document.render(doc, fmt)
        assert f"Serving: {title}" in out.replace("&#x27;", "'"), fmt
        assert struck in out and "needs 6 queries" not in out, fmt
    exported = json.loads(document.render(doc, "json"))
    (part,) = exported["inference"]
    assert part["title"] == title and part["precisions"][1]["struck"] == struck
    assert part["precisions"][0]["percentiles"][2]["n"] == 400
    rows = list(csv.DictReader(io.StringIO(document.render(doc, "csv"))))
    infer = [r for r in rows if r["mode"] == "infer"]
    assert len(infer) == 2 and len(rows) == 4
    bf16 = next(r for r in infer if r["policy"] == "mixed_bfloat16")
    assert bf16["gate"] == "struck" and bf16["speedup_struck"] == struck
    assert float(bf16["speedup_vs_float32"]) > 1.5 and bf16["p99_needs"] == "368"
    assert float(bf16["p99_ms"]) > 0 and bf16["top1_agreement"] == "0.9"


def test_records_round_trip_with_their_serving_part() -> None:
    r = decode(json.dumps(served("mixed_bfloat16", _calls(5.0), agreement=0.95)))
    assert r.inference is not None and r.inference.gate is not None
    assert r.inference.gate.top1_agreement == 0.95 and r.inference.gate.passed is False
    assert msgspec.json.decode(msgspec.json.encode(r))["params"]["mode"] == "infer"


def test_the_gate_runs_where_a_policy_or_quantization_departs_from_float32() -> None:
    from mxbench.bench.process.infer import needs_gate

    assert not needs_gate(Params(mode="infer"))
    assert needs_gate(Params(mode="infer", policy="mixed_bfloat16"))
    assert needs_gate(Params(mode="infer", quantize="int8"))
    assert not needs_gate(Params(mode="infer", policy="mixed_bfloat16", check="off"))


def test_the_call_path_is_compared_with_the_direct_call(tmp_path: Path) -> None:
    records = [
        served("float32", _calls(24.0)),
        served("float32", _calls(3.0), call="predict_on_batch"),
        served("float32", _calls(120.0), call="predict"),
    ]
    doc = _doc(tmp_path, records)
    assert [s.title.split("call ")[1].split(" ")[0] for s in doc.inference] == [
        "direct",
        "predict",
        "predict_on_batch",
    ]
    said = inference.lines(doc.loaded.winners)
    assert len(said) == 2
    assert said[0].startswith("call predict (float32): 0.20× the speed of call direct on ")
    assert said[1].startswith("call predict_on_batch (float32): 8.00× the speed of call direct")


def test_a_failed_precision_says_why_beside_its_row_not_in_the_answers(tmp_path: Path) -> None:
    failed = served("mixed_float16", _calls(5.0), quantize="int8")
    failed.update(status="error", error="Traceback...\nValueError: int8 with float16: no")
    del failed["metrics"], failed["inference"]
    doc = _doc(tmp_path, [served("float32", _calls(10.0)), failed])
    (section,) = doc.inference
    assert section.rows[1][:3] == ["mixed_float16 + int8", "error", "–"]
    assert "mixed_float16 + int8: error: ValueError: int8 with float16: no" in section.sentences
    assert inference.lines(doc.loaded.winners) == []


# ---- the serving diagnosis (report/diagnosis/serving.py), on records of known truth ----------


def _on(r: dict[str, Any], batch: int = 1, device: dict[str, Any] | None = None,
        cpu: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """``r`` at another batch, on another device or CPU (its key follows)."""
    from mxbench.cells.cell import cell_key

    r["params"]["batch_size"] = batch
    r["cell"] = cell_key(r["host"], None, None, Params(**r["params"]))
    if device is not None:
        r["device"] = device
    if cpu is not None:
        r["cpu"] = cpu
    return r


def _diagnosis(tmp_path: Path, records: list[dict[str, Any]]) -> list[str]:
    return [s for section in _doc(tmp_path, records).inference for s in section.sentences]


@pytest.mark.parametrize(
    ("device", "says"),
    [
        ({"name": "NVIDIA GeForce GTX 1660 Ti", "compute_capability": "7.5"}, "without Tensor"),
        ({"name": "Quadro M2200", "compute_capability": "5.2"}, "5.2 < 7.0"),
        ({"name": "NVIDIA A100-SXM4-40GB", "compute_capability": "8.0"}, None),
    ],
)
def test_float16_serving_without_fast_float16_is_named(
    tmp_path: Path, device: dict[str, Any], says: str | None
) -> None:
    """The 1660 Ti case (tensorflow#44191): compute capability 7.5 but no Tensor Cores."""
    gpu = {"kind": "gpu", **device}
    said = _diagnosis(tmp_path, [
        _on(served("float32", _calls(4.0)), device=gpu),
        _on(served("mixed_float16", _calls(16.0), agreement=1.0), device=gpu),
    ])  # fmt: skip
    found = [s for s in said if s.startswith("No fast float16")]
    if says is None:
        assert found == []
    else:
        (line,) = found
        assert says in line and "0.25x the speed of float32" in line


def test_int8_and_float16_on_a_cpu_without_their_instructions(tmp_path: Path) -> None:
    old = {"model": "Intel(R) Xeon(R) CPU E5-2680 v4", "flags": ["sse2", "avx2", "fma"]}
    said = _diagnosis(tmp_path, [
        _on(served("float32", _calls(4.0)), cpu=old),
        _on(served("float32", _calls(4.0), agreement=1.0, quantize="int8"), cpu=old),
        _on(served("mixed_float16", _calls(9.0), agreement=1.0), cpu=old),
    ])  # fmt: skip
    assert any(s.startswith("int8 without VNNI or AMX") for s in said), said
    assert any(s.startswith("float16 on an x86 CPU without float16 arithmetic") for s in said)
    vnni = {**old, "flags": [*old["flags"], "avx512_vnni"]}
    said = _diagnosis(tmp_path, [
        _on(served("float32", _calls(4.0)), cpu=vnni),
        _on(served("float32", _calls(3.0), agreement=1.0, quantize="int8"), cpu=vnni),
    ])  # fmt: skip
    assert not any(s.startswith("int8 without") for s in said), said


@pytest.mark.parametrize(
    ("big_ms", "host", "said"), [(13.2, "h1", True), (13.0 * 20, "h1", False), (13.2, "h2", False)]
)
def test_calls_as_slow_at_batch_256_as_at_1_are_dispatch_bound(
    tmp_path: Path, big_ms: float, host: str, said: bool
) -> None:
    """The H200's JAX direct calls: 12.97 ms at batch 1, 12.90 at batch 256; never said of
    two hosts' calls, though their GPUs have one name (per-call overhead is the host's)."""
    records = [
        served("float32", _calls(13.0)),
        _on(served("float32", _calls(big_ms), host=host), batch=256),
    ]
    found = [s for s in _diagnosis(tmp_path, records) if s.startswith("Dispatch-bound")]
    assert bool(found) is said, found
    if said:
        assert "at batch 256" in found[0] and "256x the work" in found[0]


def test_what_ran_is_told_from_any_backend_s_profiled_calls(tmp_path: Path) -> None:
    """The ladder's "kernels" column: oneDNN's ISA where its log was read (TensorFlow and
    PyTorch on a CPU), else the busiest operation of the profiled window of calls (JAX's
    XLA:CPU), and nothing from a window that failed."""
    jax_window = {"tool": "jax.profiler", "device": "cpu", "steps": 3,
                  "top_ops": [{"name": "conv_general_dilated", "category": "conv_matmul",
                               "ms_per_step": 33.2, "calls": 9}]}  # fmt: skip
    torch_window = {"tool": "torch.profiler", "device": "cpu", "steps": 3,
                    "onednn": {"gemm_isas": {"avx512_core": 1.0}},
                    "top_ops": [{"name": "aten::mkldnn_convolution", "category": "conv_matmul",
                                 "ms_per_step": 2.0, "calls": 9}]}  # fmt: skip
    failed = {**jax_window, "error": "RuntimeError: no trace"}
    records = []
    for host, profile in (("jx", jax_window), ("pt", torch_window), ("bad", failed)):
        for policy in ("float32", "mixed_bfloat16"):
            r = served(policy, _calls(10.0), agreement=1.0 if policy != "float32" else None)
            r["host"], r["profile"] = host, profile
            r["cell"] = f"{host}-{policy}"
            records.append(r)
    sections = _doc(tmp_path, records).inference
    kernels = {s.rungs[0].records[0].host: [r.kernels for r in s.rungs] for s in sections}
    assert kernels["jx"] == ["busiest: conv_general_dilated (conv_matmul)"] * 2
    assert kernels["pt"] == ["avx512_core 100%"] * 2
    assert kernels["bad"] == ["", ""]


def test_float16_on_a_cpu_with_float16_arithmetic_says_what_ran(tmp_path: Path) -> None:
    """This repository's Xeon has AVX512-FP16: oneDNN ran mixed_float16's kernels in native
    float16 (avx10_1_512) and serving was still 0.64x float32 (examples/serving-trained).
    The diagnosis says what ran, not "emulated", where two processes a side show it slower;
    where no record says, it says that."""
    fp16 = {"model": "Intel(R) Xeon(R) Processor", "flags": ["avx2", "fma", "avx512_fp16"]}
    native = {"tool": "oneDNN creation log (warm-up calls)", "device": "cpu",
              "onednn": {"gemm_isas": {"avx10_1_512": 1.0}, "native16_share": 1.0}}  # fmt: skip

    def f16(ms: float, k: int) -> dict[str, Any]:
        r = _on(served("mixed_float16", _calls(ms), agreement=1.0, repeat=k), cpu=fp16)
        r["profile"] = native
        return r

    def f32(ms: float, k: int) -> dict[str, Any]:
        return _on(served("float32", _calls(ms), repeat=k), cpu=fp16)

    said = _diagnosis(tmp_path, [f32(4.0, 0), f32(4.1, 1), f16(6.25, 0), f16(6.3, 1)])
    (line,) = [s for s in said if s.startswith("mixed_float16 ran")]
    ran = "(oneDNN avx10_1_512, 100% of its convolutions and matmuls in 16 bits)"
    assert line.startswith(f"mixed_float16 ran native float16 kernels on this CPU {ran}")
    assert "(measured: mixed_float16 0.65x [0.58–0.72] the speed of float32, slower)" in line
    assert "emulated" not in line.split(":")[0]
    faster = f16(3.2, 0)  # ResNet-50 at batch 64 here: 1.25x, natively
    said = _diagnosis(tmp_path, [f32(4.0, 0), faster])
    rule = ("mixed_float16 ran", "float16 on an x86", "this CPU has float16")
    assert not [s for s in said if s.startswith(rule)], said  # nothing to explain
    unprofiled = _on(served("mixed_float16", _calls(6.25), agreement=1.0), cpu=fp16)
    said = _diagnosis(tmp_path, [f32(4.0, 0), unprofiled])
    assert any(
        s.startswith("this CPU has float16 arithmetic (avx512_fp16), but no record") for s in said
    ), said
    (line,) = [s for s in said if s.startswith("this CPU has float16")]
    assert "0.64x the speed of float32, one process a side: no verdict" in line


@pytest.mark.parametrize(
    ("f32_ms", "f16_ms"),
    [
        ((4.0,), (6.25,)),  # one process a side: 0.64x, no interval to hold it
        ((4.0, 4.4), (4.6, 4.2)),  # two a side, 0.95x with an interval holding 1
    ],
)
def test_slower_is_said_only_where_the_interval_shows_it(
    tmp_path: Path, f32_ms: tuple[float, ...], f16_ms: tuple[float, ...]
) -> None:
    """The native-float16 sentence explains why mixed_float16 is slower: it says nothing
    where the records do not show it slower (before, a point estimate under 1 sufficed)."""
    fp16 = {"model": "Intel(R) Xeon(R) Processor", "flags": ["avx2", "fma", "avx512_fp16"]}
    native = {"tool": "oneDNN creation log (warm-up calls)", "device": "cpu",
              "onednn": {"gemm_isas": {"avx10_1_512": 1.0}, "native16_share": 1.0}}  # fmt: skip
    records = [
        _on(served("float32", _calls(ms), repeat=k), cpu=fp16) for k, ms in enumerate(f32_ms)
    ]
    for k, ms in enumerate(f16_ms):
        r = _on(served("mixed_float16", _calls(ms), agreement=1.0, repeat=k), cpu=fp16)
        r["profile"] = native
        records.append(r)
    doc = _doc(tmp_path, records)
    (section,) = doc.inference
    ratio = section.rungs[1].ratio
    assert ratio is not None and ratio.verdict in ("too few processes", "no clear difference")
    said = section.sentences
    assert not [s for s in said if s.startswith("mixed_float16 ran")], said
    assert not [s for s in inference.lines(doc.loaded.winners) if "slower" in s]


@pytest.mark.parametrize(
    ("call", "path", "advice"),
    [
        ("direct", "(call direct: eager, operation by operation)", "call: compiled"),
        ("compiled", "(call compiled: tf.function;", "larger batches spread it"),
        ("predict_on_batch", "Keras' own loop around its predict function", "call: compiled"),
    ],
)
def test_the_dispatch_sentence_knows_the_call_path(
    tmp_path: Path, call: str, path: str, advice: str
) -> None:
    """Dispatch-bound calls said of the call path the records name: eager operation by
    operation only for the direct call (before, "eager" was said for compiled calls too)."""
    records = [
        served("float32", _calls(13.0), call=call),
        _on(served("float32", _calls(13.2), call=call), batch=256),
    ]
    (line,) = [s for s in _diagnosis(tmp_path, records) if s.startswith("Dispatch-bound")]
    assert path in line and advice in line, line
    assert ("eager" in line) is (call == "direct")


def test_dispatch_bound_needs_the_whole_interval_under_the_limit(tmp_path: Path) -> None:
    """Batch 256's two processes at 11 and 22 ms against batch 1's at 13 and 13.5: the p50s'
    ratio is 1.17, under 1.5, but two processes this far apart cannot say it is: no
    sentence (the pooled calls' p50s, 13.2 against 14.5, said "dispatch-bound")."""
    records = [served("float32", _calls(ms), repeat=k) for k, ms in enumerate((13.0, 13.5))]
    records += [_on(served("float32", _calls(ms), repeat=k), batch=256)
                for k, ms in enumerate((11.0, 22.0))]  # fmt: skip
    doc = _doc(tmp_path, records)
    big = next(s for s in doc.inference if s.rungs[0].records[0].params.batch_size == 256)
    one = next(s for s in doc.inference if s.rungs[0].records[0].params.batch_size == 1)
    (ratio,) = stats.judge([(big.rungs[0].processes, one.rungs[0].processes)])
    assert ratio is not None and ratio.value < 1.5 < ratio.high
    assert not [s for s in big.sentences if s.startswith("Dispatch-bound")]


def test_the_docs_name_the_serving_rules_and_thresholds() -> None:
    """docs/serving.md names each diagnosis rule and the thresholds the code uses."""
    from mxbench.report.diagnosis import serving as serving_rules

    doc = " ".join((Path(__file__).resolve().parents[1] / "docs/serving.md").read_text().split())
    for rule in ("No fast float16", "float16 on an x86 CPU", "int8 without VNNI or AMX",
                 "Dispatch-bound calls", "Calls are not independent"):  # fmt: skip
        assert f"**{rule}**" in doc, rule
    assert f"at least {serving_rules.DISPATCH_BATCH_RATIO}x larger (`DISPATCH_BATCH_RATIO`)" in doc
    assert f"at most {serving_rules.DISPATCH_TIME_RATIO}x the small batch's" in doc
    assert f"[0, {latency.MAX_RHO}], `MAX_RHO`" in doc
    assert "(`DISPATCH_TIME_RATIO`" in doc


def _effective_by_definition(times: list[float], q: float) -> float:
    """n (1 - rho) / (1 + rho), rho the lag-1 autocorrelation of the indicator "at most
    the nearest-rank quantile", written out term by term (the known truth)."""
    n = len(times)
    cut = sorted(times)[max(1, math.ceil(q * n)) - 1]
    below = [1.0 if t <= cut else 0.0 for t in times]
    mean = sum(below) / n
    c = [b - mean for b in below]
    den = sum(x * x for x in c)
    rho = sum(c[i] * c[i + 1] for i in range(n - 1)) / den if den > 0 else 0.0
    rho = min(max(rho, 0.0), latency.MAX_RHO)
    return n * (1 - rho) / (1 + rho)


@pytest.mark.parametrize("seed", range(6))
def test_effective_calls_are_the_indicator_s_autocorrelation_by_its_definition(seed: int) -> None:
    """Counted from the indicator's ones and neighbouring pairs, as its definition sums
    term by term; calls in runs (a slow spell) are worth fewer, independent ones all."""
    import random

    rng = random.Random(seed)
    spells = [5.0 + (i // 40 % 2) * 3.0 + rng.random() for i in range(400)]  # slow spells
    independent = [5.0 + rng.random() for _ in range(400)]
    for times in (spells, independent, spells[:7], [2.0, 2.0, 2.0, 2.0]):
        for q in (0.5, 0.9, 0.99):
            assert latency.effective_calls(times, q) == pytest.approx(
                _effective_by_definition(times, q), rel=1e-12
            )
    assert latency.effective_calls(spells, 0.5) < 0.2 * len(spells)
    assert latency.effective_calls(independent, 0.5) > 0.5 * len(independent)
