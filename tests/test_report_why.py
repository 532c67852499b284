"""Where the time goes in the report (Step 15): the breakdown per table in every format, the
energy and cost columns, and the diagnosis rules that cite the profiled window's evidence
instead of guessing. Records are written by the tests with known breakdowns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mxbench.records.record import CATEGORY_NAMES
from mxbench.report.diagnosis import rules as dg
from mxbench.report.render import export, html, markdown, terminal
from mxbench.report.sections import why

from mxbench.report import document, frame
from mxbench.report.load import load
from mxbench.report.tables import Table, build
from report_records import rec, typed_all, write

A100 = {"kind": "gpu", "name": "NVIDIA A100-SXM4-40GB", "compute_capability": "8.0"}
CPU = {"kind": "cpu", "name": "cpu"}
XEON_BF16 = {"model": "Intel Xeon", "cores": 2, "flags": ["avx2", "avx512f", "avx512_bf16"]}


def profile(**ms: Any) -> dict[str, Any]:
    """A profiled window whose step splits as given (ms per step)."""
    extra = {k: ms.pop(k) for k in list(ms) if k not in CATEGORY_NAMES}
    return {"tool": "torch.profiler", "steps": 3, "step_ms": sum(ms.values()), "cost_s": 0.5,
            "breakdown_ms": ms, **extra}  # fmt: skip


def onednn(native: float | None, isas: dict[str, float], weight: str = "time") -> dict[str, Any]:
    return {"weight": weight, "gemm_isas": isas, "native16_share": native,
            "sixteen_bit_share": 1.0 if native is not None else 0.0}  # fmt: skip


def table(records: list[dict[str, Any]]) -> Table:
    (t,) = build(typed_all(records))
    return t


def cpu_pair(bf16_profile: dict[str, Any], f32_profile: dict[str, Any] | None = None) -> Table:
    f32 = f32_profile or profile(conv_matmul=60.0, elementwise_norm=20.0, host_gap=20.0)
    return table([
        rec("h", "float32", 8, median=100.0, device=CPU, cpu=XEON_BF16, profile=f32),
        rec("h", "mixed_bfloat16", 8, median=80.0, device=CPU, cpu=XEON_BF16,
            profile=bf16_profile),
    ])  # fmt: skip


def test_breakdown_is_the_timed_step_in_ms_and_its_gap_is_timed_less_busy() -> None:
    # the operations took 50 ms of a 200 ms profiled step (the profiler's own cost is the
    # rest); timed at 80 ms: 30 + 20 ms of operations, and 80 - 50 = 30 ms of gap
    bf16 = profile(conv_matmul=30.0, elementwise_norm=20.0, host_gap=150.0)
    bar = document.section(cpu_pair(bf16), "table-1").breakdown[1]
    assert (bar.policy, bar.step_ms, bar.busy_ms) == ("mixed_bfloat16", 80.0, 50.0)
    assert bar.parts["conv_matmul"] == pytest.approx(30.0)
    assert bar.parts["elementwise_norm"] == pytest.approx(20.0)
    assert bar.parts["host_gap"] == pytest.approx(80.0 - 50.0)
    assert bar.profiler_cost == pytest.approx(200.0 / 80.0 - 1)
    # operations that alone took longer than the timed step are scaled into it: no gap
    slow = profile(conv_matmul=100.0, cast=20.0, elementwise_norm=40.0, host_gap=40.0)
    bar = document.section(cpu_pair(slow), "table-1").breakdown[1]
    assert bar.parts["conv_matmul"] == pytest.approx(100.0 * 80.0 / 160.0)
    assert bar.parts["cast"] == pytest.approx(20.0 * 80.0 / 160.0)
    assert bar.parts["host_gap"] == 0.0
    assert sum(bar.parts.values()) == pytest.approx(80.0)


def test_the_profilers_own_cost_is_no_launch_overhead() -> None:
    """The H200 case (benchmarks/records/h200-paired-energy, JAX mixed_bfloat16 at batch
    256): 2.88 ms of kernels in a 2.90 ms timed step, profiled at 5.16 ms a step. Its
    profiled *shares* put 44% in the gap; the GPU was busy 99% of the timed step."""
    h200 = {"kind": "gpu", "name": "NVIDIA H200", "compute_capability": "9.0"}
    t = table([
        rec("h", "float32", 256, median=6.0, device=h200,
            profile=profile(conv_matmul=5.5, elementwise_norm=0.3, host_gap=0.4)),
        rec("h", "mixed_bfloat16", 256, median=2.90, device=h200,
            profile=profile(conv_matmul=2.10, elementwise_norm=0.78, host_gap=2.28)),
    ])  # fmt: skip
    assert dg.launch_bound(t) is None  # must not fire: busy 2.88 of 2.90 ms
    bar = why.bars(t)[1]
    assert bar.share("host_gap") == pytest.approx(0.02 / 2.90)
    said = why.note(why.bars(t))
    assert "The profiler's own cost" in said and "5.16 ms against 2.90 ms timed (+78%)" in said
    # where the operations clearly fall short of the timed step, it fires: 1.5 of 2.9 ms
    short = table([
        rec("h", "float32", 256, median=6.0, device=h200, profile=profile(conv_matmul=5.9)),
        rec("h", "mixed_bfloat16", 256, median=2.90, device=h200,
            profile=profile(conv_matmul=1.2, elementwise_norm=0.3, host_gap=3.0)),
    ])  # fmt: skip
    gap = dg.launch_bound(short)
    assert gap is not None and "mixed_bfloat16 48% at batch 256" in gap
    assert "float32" not in gap.split("nothing ran for")[1].split("of the step")[0]
    # and a small profiler cost is not said
    assert "profiler's own cost" not in why.note(why.bars(cpu_pair(profile(conv_matmul=80.0))))


def test_markdown_html_and_json_show_the_breakdown(tmp_path: Path) -> None:
    evidence = onednn(0.94, {"avx512_core_bf16": 0.94, "avx512_core": 0.06})
    bf16 = profile(conv_matmul=50.0, cast=10.0, elementwise_norm=20.0, host_gap=20.0,
                   onednn=evidence)  # fmt: skip
    recs = [
        rec("h", "float32", 8, median=100.0, device=CPU, cpu=XEON_BF16,
            profile=profile(conv_matmul=70.0, elementwise_norm=20.0, host_gap=10.0)),
        rec("h", "mixed_bfloat16", 8, median=80.0, device=CPU, cpu=XEON_BF16, profile=bf16),
    ]  # fmt: skip
    loaded = load([write(tmp_path / "h.jsonl", recs)])
    doc = document.build(loaded, build(loaded.winners))
    md = markdown.render(doc)
    assert "Where the time goes (ms per step)" in md
    row = next(x for x in md.splitlines() if x.startswith("|") and "mixed_bfloat16 " in x
               and "avx512_core_bf16" in x)  # fmt: skip
    cells = [c.strip() for c in row.strip("|").split("|")]
    # busy 80 ms of the profiled step, timed 80 ms: the operations' ms as profiled, no gap
    assert cells[:5] == ["8", "mixed_bfloat16", "80.00", "50.00", "20.00"]
    assert "avx512_core_bf16 94%, native 16-bit 94%" in cells[-1]
    page = html.render(doc, plot=lambda t: [])
    assert page.count('class="bar"') == 2 and f"casts: 10.00 ms ({10 / 80:.0%})" in page
    data = json.loads(export.render(doc))
    (why,) = [t["where_the_time_goes"] for t in data["tables"]]
    assert why[1]["ms"]["cast"] == pytest.approx(10.0)


def test_energy_and_cost_columns_only_where_recorded(tmp_path: Path) -> None:
    # 3.6 $/h at 1000 images/s: a million images take 1000 s, i.e. 1.00 $
    recs = [
        rec("h", "float32", 10, median=10.0, device=A100, cost_per_hour=3.6,
            metrics={"step_ms": {"median": 10.0, "n": 5}, "images_per_s": 1000.0,
                     "energy_j_per_image": 0.25, "energy_j_per_step": 2.5,
                     "energy_source": "nvml"}),
        rec("h", "mixed_float16", 10, median=5.0, device=A100, cost_per_hour=3.6,
            metrics={"step_ms": {"median": 5.0, "n": 5}, "images_per_s": 2000.0}),
    ]  # fmt: skip
    t = table(recs)
    s = document.section(t, "t")
    row = dict(zip(s.headers, s.rows[0], strict=True))
    # each figure's source in its header: the device's counter, the host's price
    cost, joules = "cost/M images (at $3.6/h)", "J/image (GPU board, NVML)"
    assert row[f"float32 {cost}"] == "1" and row[f"mixed_float16 {cost}"] == "0.5"
    assert row[f"float32 {joules}"] == "0.25" and row[f"mixed_float16 {joules}"] == ""
    plain = document.section(table([rec("h", "float32", 8, device=A100)]), "t")
    assert not any("J/image" in h or "cost" in h for h in plain.headers)


def test_cpu_kernels_cite_the_onednn_evidence_and_replace_the_flag_guess() -> None:
    evidence = onednn(0.94, {"avx512_core_bf16": 0.94, "ref": 0.06})
    native = cpu_pair(profile(conv_matmul=50.0, host_gap=10.0, onednn=evidence))
    said = dg.cpu_kernels(native)
    assert said is not None and "bf16 convolutions/matmuls ran on avx512_core_bf16" in said
    assert "94% of their time" in said
    assert dg.bf16_on_cpu(native) is None  # evidence replaces "this CPU has AVX512_BF16"
    converted = cpu_pair(profile(conv_matmul=50.0, host_gap=10.0,
                                 onednn=onednn(0.1, {"avx512_core": 0.9, "avx512_core_bf16": 0.1},
                                               weight="flops")))  # fmt: skip
    said = dg.cpu_kernels(converted)
    assert said is not None and "were converted to float32" in said and "90%" in said
    assert "arithmetic" in said  # weighed by FLOPs, and says so
    guess = table([rec("h", "mixed_bfloat16", 8, device=CPU, cpu=XEON_BF16)])
    assert dg.cpu_kernels(guess) is None and dg.bf16_on_cpu(guess) is not None


def test_where_onednn_did_not_run_the_path_that_did_is_said_not_the_flag_guess() -> None:
    """An AVX2-only EPYC's records (issue 47): TensorFlow left oneDNN off, PyTorch had no
    oneDNN bfloat16 path. The record says which path ran (profile.onednn.ran false, path,
    why, the operations); the report says that, never "oneDNN runs bfloat16 natively"."""
    why = "TF_ENABLE_ONEDNN_OPTS=0: TensorFlow's oneDNN operations were off"
    eigen = {"ran": False, "path": "eigen", "why": why,
             "kernels": ["Conv2DBackpropInput", "Conv2DBackpropFilter", "Conv2D"]}  # fmt: skip
    t = cpu_pair(profile(conv_matmul=50.0, host_gap=10.0, onednn=eigen))
    said = dg.cpu_kernels(t)
    assert said is not None and said.startswith("Kernels that ran without oneDNN:")
    assert "TensorFlow's own (Eigen) kernels ran the convolutions/matmuls (Conv2DBackprop" in said
    assert why in said and "oneDNN's verbose log" not in said
    assert dg.bf16_on_cpu(t) is None  # XEON_BF16's flags: no "oneDNN runs bfloat16 natively"
    bar = document.section(t, "t").breakdown
    assert bar[1].kernels == "no oneDNN: eigen kernels"
    aten = {"ran": False, "path": "aten", "why": "PyTorch has no oneDNN bfloat16 path",
            "kernels": ["aten::_slow_conv2d_backward"]}  # fmt: skip
    said = dg.cpu_kernels(cpu_pair(profile(conv_matmul=50.0, onednn=aten)))
    assert said is not None and "PyTorch's own (ATen) kernels ran" in said
    # oneDNN's log off (ran null): nothing is known of the kernels, the flag rule speaks
    unknown = cpu_pair(profile(conv_matmul=50.0, onednn={"ran": None, "why": "log off"}))
    assert dg.cpu_kernels(unknown) is None and dg.bf16_on_cpu(unknown) is not None


def test_settings_that_keep_onednn_from_bf16_are_said_without_a_profile() -> None:
    """No profiled window: the flag rule reads the settings too. TensorFlow's oneDNN off or
    oneDNN capped below bfloat16 (ONEDNN_MAX_CPU_ISA) on a CPU with AVX512_BF16: bfloat16
    is not native there; AMX capped at AVX512_CORE_BF16: no tiles."""

    def bf16(cpu: dict[str, Any], backend: str = "tensorflow", **settings: str) -> str | None:
        return dg.bf16_on_cpu(table([
            rec("h", "float32", 8, median=100.0, device=CPU, cpu=cpu, backend=backend,
                settings=settings),
            rec("h", "mixed_bfloat16", 8, median=90.0, device=CPU, cpu=cpu, backend=backend,
                settings=settings),
        ]))  # fmt: skip

    off = bf16(XEON_BF16, onednn="0")
    assert off is not None and "TensorFlow's oneDNN operations were off" in off
    assert "no speedup is expected" in off and "natively" not in off
    capped = bf16(XEON_BF16, "torch", onednn_max_cpu_isa="AVX2")
    assert capped is not None and "ONEDNN_MAX_CPU_ISA=AVX2" in capped and "natively" not in capped
    assert "natively" in (bf16(XEON_BF16, onednn_max_cpu_isa="AVX512_CORE_BF16") or "")
    amx_cpu = {**XEON_BF16, "flags": [*XEON_BF16["flags"], "amx_bf16", "amx_tile"]}
    below_amx = bf16(amx_cpu, onednn_max_cpu_isa="AVX512_CORE_BF16")
    assert below_amx is not None and "This CPU has AMX, but oneDNN was capped" in below_amx
    assert "instead of the tiles" in below_amx
    assert "tile matrix units" in (bf16(amx_cpu, onednn_max_cpu_isa="AVX512_CORE_AMX") or "")
    # JAX: XLA's kernels, no oneDNN: its settings change nothing there
    assert bf16(XEON_BF16, "jax", onednn="0", onednn_max_cpu_isa="AVX2") == bf16(XEON_BF16, "jax")


def test_a_paired_record_of_every_arms_kernels_is_not_read_as_its_arms() -> None:
    """The committed Step 18 series was measured while a paired TensorFlow process gave each
    arm the whole process's oneDNN log (issue 48): its float32 records read
    "avx10_1_512_amx 50%, native 16-bit 100%". Those figures (OneDnnEvidence.scope null on a
    paired TensorFlow record) are not printed as an arm's, nor cited; a record whose figures
    came from its own arm's turns (scope "turns") is read as before."""
    series = Path(__file__).parents[1] / "benchmarks/records/cpu-step18-series/quiet/paired-0"
    loaded = load([series])
    profiled = [r for r in loaded.winners if r.profile is not None and r.profile.onednn]
    f32 = [r.profile.onednn for r in profiled if r.params.policy == "float32"]
    assert f32 and all(d.gemm_isas.get("avx10_1_512_amx") == 0.5 for d in f32)
    t = build(loaded.winners)[0]
    assert [b.kernels for b in document.section(t, "t").breakdown] == [""] * 4
    assert dg.cpu_kernels(t) is None  # not cited: the CPU's flags speak, as a guess
    assert "This CPU has AMX" in (dg.bf16_on_cpu(t) or "")
    for r in profiled:  # the same figures, had they been each arm's own
        r.profile.onednn.scope = "turns"
    t = build(loaded.winners)[0]
    assert "avx10_1_512_amx 50%" in document.section(t, "t").breakdown[0].kernels
    assert "ran on avx10_1_512_amx kernels" in (dg.cpu_kernels(t) or "")


def test_amx_kernels_are_named_as_tile_matrix_units() -> None:
    """An AMX Xeon: oneDNN 3.7+ names the ISA avx10_1_512_amx, and a float32 GEMM that names
    no ISA may lead the shares; the sentence names the native kernel and says what AMX is."""
    evidence = onednn(1.0, {"gemm": 0.55, "avx10_1_512_amx": 0.45}, weight="flops")
    t = cpu_pair(profile(conv_matmul=50.0, host_gap=10.0, onednn=evidence))
    said = dg.cpu_kernels(t)
    assert said is not None and "bf16 convolutions/matmuls ran on avx10_1_512_amx kernels" in said
    assert "AMX tile matrix units" in said and "2x or more faster than float32" in said
    assert "100% of their arithmetic in 16 bits natively" in said
    amx_first = onednn(1.0, {"avx512_core_amx": 1.0})
    bar = document.section(cpu_pair(profile(conv_matmul=50.0, onednn=amx_first)), "t").breakdown
    assert bar[1].kernels == "avx512_core_amx 100% (AMX tiles), native 16-bit 100%"
    bf16_only = cpu_pair(profile(conv_matmul=50.0, onednn=onednn(0.94, {"avx512_core_bf16": 1})))
    assert "AMX" not in (dg.cpu_kernels(bf16_only) or "AMX")


def test_float16_that_ran_natively_is_not_called_emulated() -> None:
    """A Xeon with AVX512-FP16 (this repository's): where oneDNN's log shows mixed_float16's
    convolutions and matmuls in native float16, what ran says it (cpu_kernels) and the
    "emulated" rule stays silent; with the instructions but no log it says no record shows
    them used; without them, emulated."""
    fp16_cpu = {**XEON_BF16, "flags": [*XEON_BF16["flags"], "avx512_fp16"]}

    def pair(f16_profile: dict[str, Any] | None, cpu: dict[str, Any]) -> Table:
        return table([
            rec("h", "float32", 8, median=100.0, device=CPU, cpu=cpu),
            rec("h", "mixed_float16", 8, median=150.0, device=CPU, cpu=cpu, profile=f16_profile),
        ])  # fmt: skip

    native = pair(profile(conv_matmul=50.0, onednn=onednn(1.0, {"avx10_1_512": 1.0})), fp16_cpu)
    assert dg.float16_emulated_on_cpu(native) is None
    said = dg.cpu_kernels(native)
    assert said is not None and "float16 convolutions/matmuls ran on avx10_1_512" in said
    unprofiled = dg.float16_emulated_on_cpu(pair(None, fp16_cpu))
    assert unprofiled is not None
    assert unprofiled.startswith("this CPU has float16 arithmetic (avx512_fp16), but no record")
    converted = pair(profile(conv_matmul=50.0, onednn=onednn(None, {"avx512_core": 1.0})), fp16_cpu)
    assert "emulated" in (dg.float16_emulated_on_cpu(converted) or "")  # the log: float32
    assert "emulated" in (dg.float16_emulated_on_cpu(pair(None, XEON_BF16)) or "")


def test_reference_loops_are_named_as_the_cost_not_emulation() -> None:
    """PyTorch's mixed_float16 training on this repository's Xeon ran 30x slower than
    float32: oneDNN ran the float16 weight gradients on its reference loops (ref:any). The
    kernels' sentence says so, with the pass; the "emulated" guess stays silent."""
    fp16_cpu = {**XEON_BF16, "flags": [*XEON_BF16["flags"], "avx512_fp16"]}
    ref = {**onednn(0.0077, {"ref": 0.9923, "avx10_1_512": 0.0077}),
           "ref_passes": {"backward_weights": 0.97, "forward_training": 0.0223}}  # fmt: skip
    t = table([
        rec("h", "float32", 8, median=60.0, device=CPU, cpu=fp16_cpu),
        rec("h", "mixed_float16", 8, median=1800.0, device=CPU, cpu=fp16_cpu,
            profile=profile(conv_matmul=50.0, onednn=ref)),
    ])  # fmt: skip
    said = dg.cpu_kernels(t)
    assert said is not None
    assert "99% of the convolutions/matmuls' time ran on oneDNN's reference loops" in said
    assert "the weight gradients 97%, the forward pass 2%" in said
    assert "converted to float32" not in said
    assert dg.float16_emulated_on_cpu(t) is None
    # a small reference share (a float32 matmul on ref beside native kernels) is no lead
    few = cpu_pair(profile(conv_matmul=50.0, onednn=onednn(0.9, {"avx512_core_bf16": 0.9,
                                                                  "ref": 0.1})))  # fmt: skip
    assert "reference loops" not in (dg.cpu_kernels(few) or "")


def test_no_tensor_core_kernels_despite_cc_8() -> None:
    def gpu(share: float) -> Table:
        return table([
            rec("h", "float32", 64, median=100.0, device=A100),
            rec("h", "mixed_float16", 64, median=99.0, device=A100,
                profile=profile(conv_matmul=80.0, host_gap=20.0, tensor_core_share=share)),
        ])  # fmt: skip

    said = dg.tensor_core_kernels(gpu(0.0))
    assert said is not None and "No Tensor Core kernels ran" in said and "8.0" in said
    assert "heuristic" in said
    said = dg.tensor_core_kernels(gpu(0.9))
    assert said is not None and "90%" in said


def test_cast_memory_bound_and_launch_bound_from_the_window() -> None:
    t = cpu_pair(
        profile(conv_matmul=20.0, cast=15.0, elementwise_norm=20.0, host_gap=45.0),
        profile(conv_matmul=30.0, elementwise_norm=50.0, host_gap=20.0),
    )
    # shares of the timed steps (float32 100 ms, mixed_bfloat16 80 ms): the operations'
    # profiled ms over the timed step, the gap the timed step less the operations
    cast = dg.cast_overhead(t)
    assert cast is not None and f"mixed_bfloat16 {15 / 80:.0%} at batch 8" in cast
    mem = dg.measured_memory_bound(t)
    assert mem is not None and "float32 50% at batch 8" in mem and "mixed_bfloat16" not in mem
    gap = dg.launch_bound(t)
    bf16_gap = (80 - (20 + 15 + 20)) / 80  # 31%, over HOST_GAP_SHARE; float32's 20% is not
    assert gap is not None and f"mixed_bfloat16 {bf16_gap:.0%} at batch 8" in gap
    assert "float32" not in gap
    quiet = cpu_pair(profile(conv_matmul=90.0, cast=1.0, elementwise_norm=5.0, host_gap=4.0),
                     profile(conv_matmul=90.0, elementwise_norm=5.0, host_gap=5.0))  # fmt: skip
    assert dg.cast_overhead(quiet) is None and dg.measured_memory_bound(quiet) is None
    assert dg.launch_bound(quiet) is None
    # measured evidence silences the guesses from step length and layer counts
    short = table([
        rec("h", "float32", 8, median=5.0, device=CPU, profile=profile(conv_matmul=5.0)),
        rec("h", "mixed_bfloat16", 8, median=4.0, device=CPU, profile=profile(conv_matmul=4.0)),
    ])  # fmt: skip
    assert dg.overhead_bound(short) is None


def test_a_failed_window_is_no_evidence() -> None:
    t = cpu_pair({"tool": "tf.profiler", "error": "RuntimeError: no trace"})
    assert [b.policy for b in document.section(t, "t").breakdown] == ["float32"]
    assert dg.cast_overhead(t) is None


def test_a_failed_window_says_so_per_cell_in_every_format(tmp_path: Path) -> None:
    """The record's ``profile.error`` reaches every format with its cell and reason; the
    other cells' breakdowns stand."""
    reason = "RuntimeError: the profiler wrote no trace under /tmp/x"
    recs = [
        rec("h", "float32", 8, median=100.0, device=CPU, cpu=XEON_BF16,
            profile=profile(conv_matmul=70.0, elementwise_norm=20.0, host_gap=10.0)),
        rec("h", "mixed_bfloat16", 8, median=80.0, device=CPU, cpu=XEON_BF16,
            profile={"tool": "jax.profiler", "steps": 3, "error": f"Traceback...\n{reason}"}),
    ]  # fmt: skip
    loaded = load([write(tmp_path / "h.jsonl", recs)])
    doc = document.build(loaded, build(loaded.winners))
    said = f"batch 8 mixed_bfloat16: profiled window failed: {reason}"
    assert said in markdown.render(doc)
    assert said in html.render(doc, plot=lambda t: [])
    assert said in " ".join(terminal.render(doc, width=400).split())
    (table_json,) = json.loads(export.render(doc))["tables"]
    assert said in table_json["failures"]
    assert [b["policy"] for b in table_json["where_the_time_goes"]] == ["float32"]
    rows = {r["policy"]: r for r in frame.rows(loaded, list(doc.tables))}
    assert rows["mixed_bfloat16"]["profile_error"] == reason
    assert rows["float32"]["profile_error"] is None
    assert reason in frame.to_csv(loaded, list(doc.tables))


def test_the_note_names_the_largest_work_besides_conv_and_threads_side_by_side() -> None:
    """What mixed precision's faster arithmetic does not shrink, in ms of the timed step; and
    where operations ran on several threads at once, that the bars are wall-clock time."""
    bf16 = profile(conv_matmul=30.0, elementwise_norm=20.0, cast=5.0, host_gap=150.0,
                   ops_ms=55.0 * 1.5)  # fmt: skip
    f32 = profile(conv_matmul=60.0, layout=10.0, host_gap=30.0, ops_ms=70.0)
    said = why.note(why.bars(cpu_pair(bf16, f32)))
    assert "the largest part of the step: float32 at batch 8: layout 10%" in said
    assert f"mixed_bfloat16 at batch 8: memory-bound {20 / 80:.0%}" in said
    assert "their own times add up to 1.5x the busy time" in said
    # only conv/matmul work, one operation at a time: neither is said
    quiet = why.note(why.bars(cpu_pair(profile(conv_matmul=70.0, host_gap=5.0, ops_ms=70.0),
                                       profile(conv_matmul=90.0, ops_ms=90.0))))  # fmt: skip
    assert "Besides convolutions" not in quiet and "side by side" not in quiet
    # just under the threshold: not said
    under = profile(conv_matmul=70.0, ops_ms=70.0 * (why.SIDE_BY_SIDE - 0.01))
    assert "side by side" not in why.note(why.bars(cpu_pair(under, under)))
