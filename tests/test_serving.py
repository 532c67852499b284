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

from mxbench import latency, serving
from mxbench.cells import expand, pair_up
from mxbench.codec import decode
from mxbench.errors import UsageError
from mxbench.matrix import parse_matrix
from mxbench.params import Params
from mxbench.report import answers, document, inference, load, tables
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
    from mxbench.cells import cell_key

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


def test_percentiles_pool_the_processes_and_say_what_they_rest_on(tmp_path: Path) -> None:
    records = [
        served("float32", _calls(10.0, n=200), repeat=0),
        served("float32", _calls(10.0, n=200), repeat=1),
        served("mixed_bfloat16", _calls(5.0, n=100), agreement=1.0, repeat=0),
        served("mixed_bfloat16", _calls(5.0, n=100), agreement=1.0, repeat=1),
    ]
    (section,) = _doc(tmp_path, records).inference
    base, bf16 = section.rows
    assert base[3].endswith("(n=400)") and "needs" not in base[3]  # p99 of 400 calls
    assert bf16[3] == "needs 368 queries (n=200)"
    assert bf16[1].endswith("(n=200)") and "[" in bf16[1]
    rung = section.rungs[1]
    assert rung.ratio is not None and rung.ratio.judged  # two processes per side: a verdict
    assert 1.9 < rung.ratio.value < 2.1


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
    from mxbench.bench.infer import needs_gate

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


# ---- the serving diagnosis (report/diagnose_infer.py), on records of known truth ----------


def _on(r: dict[str, Any], batch: int = 1, device: dict[str, Any] | None = None,
        cpu: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """``r`` at another batch, on another device or CPU (its key follows)."""
    from mxbench.cells import cell_key

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


@pytest.mark.parametrize(("big_ms", "said"), [(13.2, True), (13.0 * 20, False)])
def test_calls_as_slow_at_batch_256_as_at_1_are_dispatch_bound(
    tmp_path: Path, big_ms: float, said: bool
) -> None:
    """The H200's JAX direct calls: 12.97 ms at batch 1, 12.90 at batch 256."""
    records = [
        served("float32", _calls(13.0)),
        _on(served("float32", _calls(big_ms), host="h1"), batch=256),
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
    The diagnosis says what ran, not "emulated"; where no record says, it says that."""
    fp16 = {"model": "Intel(R) Xeon(R) Processor", "flags": ["avx2", "fma", "avx512_fp16"]}
    native = {"tool": "oneDNN creation log (warm-up calls)", "device": "cpu",
              "onednn": {"gemm_isas": {"avx10_1_512": 1.0}, "native16_share": 1.0}}  # fmt: skip
    f16 = _on(served("mixed_float16", _calls(6.25), agreement=1.0), cpu=fp16)
    f16["profile"] = native
    said = _diagnosis(tmp_path, [_on(served("float32", _calls(4.0)), cpu=fp16), f16])
    (line,) = [s for s in said if s.startswith("mixed_float16 ran")]
    ran = "(oneDNN avx10_1_512, 100% of its convolutions and matmuls in 16 bits)"
    assert line.startswith(f"mixed_float16 ran native float16 kernels on this CPU {ran}")
    assert "0.64x the speed of float32" in line and "emulated" not in line.split(":")[0]
    faster = _on(served("mixed_float16", _calls(3.2), agreement=1.0), cpu=fp16)
    faster["profile"] = native  # ResNet-50 at batch 64 here: 1.25x, natively
    said = _diagnosis(tmp_path, [_on(served("float32", _calls(4.0)), cpu=fp16), faster])
    rule = ("mixed_float16 ran", "float16 on an x86", "this CPU has float16")
    assert not [s for s in said if s.startswith(rule)], said  # nothing to explain
    unprofiled = _on(served("mixed_float16", _calls(6.25), agreement=1.0), cpu=fp16)
    said = _diagnosis(tmp_path, [_on(served("float32", _calls(4.0)), cpu=fp16), unprofiled])
    assert any(
        s.startswith("this CPU has float16 arithmetic (avx512_fp16), but no record") for s in said
    ), said
