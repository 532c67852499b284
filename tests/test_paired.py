"""The paired design: the arms of a comparison in one process, in interleaved windows.

Real processes and real frameworks (TensorFlow, JAX, PyTorch) for the bench; the turnstile
against arms of a known speed; the interference probe against a real competing process;
the planning of paired processes; a real `mxbench run` that resumes a paired run; the A/A
noise floor end to end."""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

import cpu_kinds
from bench_helpers import SMALL, run_bench, shared_bench
from conftest import wait_until
from mxbench import stats
from mxbench.bench.evidence import interference, onednn
from mxbench.bench.process import windows
from mxbench.cells.cell import expand, pair_up, to_run
from mxbench.matrix.file import parse_matrix

PAIR = ["--image-size", "32", "--batch-size", "8", "--steps", "400", "--warmup-steps", "2",
        "--timed-s", "1.5", "--profile", "off"]  # fmt: skip


def lines(stdout: str) -> list[dict[str, Any]]:
    """The final records a paired process printed (each arm's measured record printed before
    an extra phase names it in ``pending``)."""
    every = [json.loads(x) for x in stdout.splitlines() if x.startswith("{")]
    return [r for r in every if not r.get("pending")]


def check_paired(recs: list[dict[str, Any]], steps: int) -> None:
    """What every paired process's records must say, whatever the backend."""
    assert [r["params"]["policy"] for r in recs] == ["float32", "mixed_bfloat16"]
    assert all(r["status"] == "ok" for r in recs), [r["error"] for r in recs]
    base, arm = (r["pairing"] for r in recs)
    assert base["group"] == arm["group"] and base["arms"] == ["float32", "mixed_bfloat16"]
    order, k = base["order"], base["window_steps"]
    rounds = len(order) // 2
    assert rounds >= windows.MIN_ROUNDS and len(order) == 2 * rounds
    # every round is a permutation of the arms, in a random order (not always A first)
    assert all(sorted(order[i : i + 2]) == ["A", "B"] for i in range(0, len(order), 2))
    for r, pair in zip(recs, (base, arm), strict=True):
        ws = pair["windows"]
        assert len(ws) == rounds and all(w["steps"] == k for w in ws)
        assert [w["round"] for w in ws] == list(range(rounds))
        step = r["metrics"]["step_ms"]
        assert step["n"] == len(step["samples"]) == rounds * k <= steps
        # (that a window's clock is right is checked against a known step time: the
        # turnstile test below; its steps adding up to it holds by construction)
        # every timed step's loss, recovered from Keras' running means, finite
        losses = r["metrics"]["losses"]
        assert len(losses) == step["n"] and all(x is not None and x > 0 for x in losses)
        assert r["metrics"]["peak_memory_bytes"] is None  # two models: no one policy's peak
    assert base["ratios"] == [] and len(arm["ratios"]) == rounds == len(arm["clean"])
    for w_base, w_arm, ratio in zip(base["windows"], arm["windows"], arm["ratios"], strict=True):
        assert math.isclose(ratio, w_base["ms"] / w_arm["ms"], rel_tol=1e-3)
    # windows never overlap: one arm at a time, in the order recorded
    spans = sorted(
        (w["start_s"], w["start_s"] + w["ms"] * w["steps"] / 1000, letter)
        for pair, letter in ((base, "A"), (arm, "B"))
        for w in pair["windows"]
    )
    assert "".join(s[2] for s in spans) == order
    assert all(a[1] <= b[0] + 1e-3 for a, b in itertools.pairwise(spans))
    for r in recs:
        inter = r["pairing"]["windows"][0]["interference"]
        assert inter["own_cores"] is not None and inter["own_cores"] > 0
        phases = r["metrics"]["phases_s"]
        assert phases["timed"] > 0 and phases["first_step"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "jax", "torch"])
def test_a_paired_process_times_both_arms_in_interleaved_windows(backend: str) -> None:
    """One process, two batch sizes: each batch size a paired pass of its own, the records
    pass by pass (--batch-size's first), the process's id and phases shared by all."""
    pytest.importorskip({"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}[backend])
    run = run_bench(*PAIR, "--backend", backend, "--pair-with", "mixed_bfloat16",
                    "--with-batch-sizes", "4")  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    recs = lines(run.stdout)[-4:]
    assert [r["params"]["batch_size"] for r in recs] == [8, 8, 4, 4]
    check_paired(recs[:2], 400)
    check_paired(recs[2:], 400)
    assert len({r["pairing"]["group"] for r in recs}) == 1  # one process
    assert all(r["metrics"]["phases_s"] == recs[0]["metrics"]["phases_s"] for r in recs)
    assert recs[0]["metrics"]["phases_s"]["timed"] >= 2 * 1.5  # both passes' windows
    # the roofs, found once for the process: every arm's record carries the same
    assert recs[0]["roofs"] and all(r["roofs"] == recs[0]["roofs"] for r in recs)


# Small profiled cells on the AVX512_BF16 kind (tests/cpu_kinds.py): the kernels' evidence
ARMS = ["--image-size", "32", "--batch-size", "8", "--steps", "24", "--warmup-steps", "2",
        "--timed-s", "0.3", "--profile", "on", "--check", "off"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "torch"])
def test_each_arm_says_which_kernels_it_ran_itself(backend: str) -> None:
    """Two arms of different policies in one process: float32's record names no 16-bit
    kernel, and mixed_bfloat16's says what a process of mixed_bfloat16 alone says (issue 48:
    a paired TensorFlow process gave each arm the whole process's oneDNN log, so float32
    "ran bf16" and mixed's 16-bit share was halved; PyTorch's second arm had no ISA, oneDNN
    printing its info lines once per process). What must have run is judged from each
    record's own CPU and settings (cpu_kinds.check_kernels)."""
    pytest.importorskip(backend)
    kind = cpu_kinds.KINDS["avx512_bf16"]
    run = run_bench(*ARMS, "--backend", backend, "--pair-with", "mixed_bfloat16",
                    env=cpu_kinds.env("avx512_bf16"))  # fmt: skip
    # the process of its own: test_profile's cell of this kind (one measurement per session)
    solo = shared_bench("--backend", backend, "--policy", "mixed_bfloat16", *SMALL,
                        "--check", "off", env=kind)  # fmt: skip
    assert run.returncode == 0 and solo.returncode == 0, (run.stderr + solo.stderr)[-3000:]
    base, arm = lines(run.stdout)
    assert [base["params"]["policy"], arm["params"]["policy"]] == ["float32", "mixed_bfloat16"]
    own = [cpu_kinds.check_kernels(r) for r in (base, arm, solo.record)]
    f32, mixed, alone = own
    assert not f32["sixteen_bit_share"] and f32["native16_share"] is None, f32
    assert not [k for k in f32["gemm_isas"] if onednn.native16(k)], f32
    assert all(k.endswith((" f32", "None")) for k in f32["kernels"]) or not f32["ran"], f32
    same = ("ran", "path", "isa", "weight")
    assert {k: mixed[k] for k in same} == {k: alone[k] for k in same}, (mixed, alone)
    # shares of the same kernels: exact by their arithmetic (TensorFlow), close by their
    # measured times (PyTorch)
    tol = 0 if alone["weight"] == "flops" else 0.05
    assert mixed["gemm_isas"].keys() == alone["gemm_isas"].keys(), (mixed, alone)
    pairs = [(mixed["gemm_isas"][k], alone["gemm_isas"][k]) for k in alone["gemm_isas"]]
    pairs += [(mixed[k], alone[k]) for k in ("sixteen_bit_share", "native16_share")]
    for a, b in pairs:
        assert (a is None) == (b is None) and abs((a or 0) - (b or 0)) <= tol, (mixed, alone)
    if alone["weight"] == "flops":  # every distinct kernel, logged at its creation
        assert mixed["kernels"] == alone["kernels"], (mixed, alone)
    if backend == "tensorflow" and alone["ran"]:  # whose log the figures come from
        assert (alone["scope"], mixed["scope"], f32["scope"]) == ("process", "turns", "turns")
        assert mixed["left_out"] is not None and alone["left_out"] is None
    elif backend == "torch" and alone["ran"]:
        assert mixed["scope"] == f32["scope"] == alone["scope"] == "window"


def test_pair_with_refuses_what_it_cannot_pair() -> None:
    for args, says in (
        (["--pair-with", "nope"], "--pair-with 'nope'"),
        (["--pair-with", "mixed_bfloat16,mixed_bfloat16"], "each policy once"),
        (["--pair-with", "mixed_bfloat16", "--steps-per-execution", "2", "--steps", "4",
          "--warmup-steps", "2"], "one policy per process"),
        (["--with-batch-sizes", "16"], "goes with --pair-with"),
        (["--pair-with", "mixed_bfloat16", "--with-batch-sizes", "16,x"], "whole numbers"),
        (["--pair-with", "mixed_bfloat16", "--batch-size", "16", "--with-batch-sizes", "8,16"],
         "each batch size once"),
    ):  # fmt: skip
        run = run_bench(*args)
        assert run.returncode == 2 and says in run.stderr, run.stderr[-2000:]
        assert run.stdout == ""


class _Model:
    stop_training = False


def _fake_fit(step_s: float, order: list[str], name: str, log: list[str] | None = None) -> Any:
    """A training loop whose steps take ``step_s`` (a known truth), driving the callback as
    Keras does; ``log``: each step's name, as oneDNN logs what a step creates."""

    def fit(callback: Any, steps: int) -> None:
        model = _Model()
        callback.set_model(model)
        for batch in range(steps):
            callback.on_train_batch_begin(batch)
            if model.stop_training:
                order.append(f"{name}-spare")
            time.sleep(step_s)
            if log is not None:
                log.append(f"{name}-spare" if model.stop_training else name)
            callback.on_train_batch_end(batch, {"loss": 1.0})
            if model.stop_training:
                break

    return fit


def test_the_turnstile_recovers_a_known_speedup_and_runs_one_arm_at_a_time() -> None:
    pytest.importorskip("keras")
    spare: list[str] = []
    log: list[str] = []  # the steps, and where each arm's turn begins and ends
    plan = windows.Plan(warmup=2, max_steps=400, timed_s=1.2)
    fits = [_fake_fit(0.004, spare, "A", log), _fake_fit(0.002, spare, "B", log)]
    out = windows.run(fits, plan, random.Random(7), turn=lambda arm: log.append(f"turn {arm}"))
    seen, whose = set(), "turn None"  # every step in its own arm's turn, the spare ones in none
    for entry in log:
        if entry.startswith("turn "):
            whose = entry
        else:
            seen.add((entry, whose))
    assert seen == {("A", "turn 0"), ("B", "turn 1"), ("A-spare", "turn None"),
                    ("B-spare", "turn None")}  # fmt: skip
    pace = math.sqrt(0.004 * 0.002)  # the arms' steps, geometric mean: k from the warm-up
    assert abs(out.k - windows.WINDOW_S / pace) <= 0.35 * windows.WINDOW_S / pace, out.k
    assert out.rounds >= windows.MIN_ROUNDS and sorted(spare) == ["A-spare", "B-spare"]
    a, b = out.logs
    ratios = [(wa.end - wa.start) / (wb.end - wb.start)
              for wa, wb in zip(a.windows, b.windows, strict=True)]  # fmt: skip
    med = sorted(ratios)[len(ratios) // 2]
    assert 1.7 < med < 2.3, ratios  # sleep granularity aside: twice as fast
    # each window's time per step is the known step time (sleep only overshoots, a little;
    # a loaded machine a little more), not a figure derived from itself
    for log_, step_s in ((a, 0.004), (b, 0.002)):
        per_step = sorted((w.end - w.start) / w.steps for w in log_.windows)
        assert step_s <= per_step[len(per_step) // 2] < step_s * 1.6, (step_s, per_step)
    every = sorted([(w.start, w.end) for w in a.windows] + [(w.start, w.end) for w in b.windows])
    assert all(x[1] <= y[0] for x, y in itertools.pairwise(every))
    assert set(out.order[:2]) == {"A", "B"} and len(out.order) == 2 * out.rounds


def test_an_arm_that_fails_fails_the_process_with_its_error() -> None:
    pytest.importorskip("keras")

    def broken(callback: Any, steps: int) -> None:
        callback.set_model(_Model())
        callback.on_train_batch_begin(0)
        raise MemoryError("out of memory in arm B")

    plan = windows.Plan(warmup=2, max_steps=100, timed_s=0.5)
    with pytest.raises(MemoryError, match="arm B"):
        windows.run([_fake_fit(0.002, [], "A"), broken], plan, random.Random(1))


BURN = "import time\nend = time.monotonic() + 3\nwhile time.monotonic() < end: pass\n"


def _cpu_s(pid: int) -> float:
    """A process's CPU time so far (s), from /proc/<pid>/stat (utime + stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_interference_probe_sees_another_process_hold_a_core() -> None:
    """The probe's 'other processes' include a real competing process, at least the CPU it
    was measured to get (whatever else this machine runs meanwhile)."""
    burner = subprocess.Popen([sys.executable, "-c", BURN])
    try:
        wait_until(lambda: _cpu_s(burner.pid) > 0.05, "the burner to get CPU", 30)
        before, a = _cpu_s(burner.pid), interference.snapshot()
        time.sleep(1.0)
        busy = interference.between(a, interference.snapshot())
        got = (_cpu_s(burner.pid) - before) / 1.0
    finally:
        burner.kill()
        burner.wait()
    assert got > 0.3, got  # the burner ran
    assert busy.others_cores is not None and busy.others_cores >= got - 0.15, (got, busy)
    assert busy.own_cores is not None and busy.own_cores < 0.2  # this process slept
    # a bench using 1.7 cores of 2 would have been held back; of 16 it would not
    assert interference.disturbed(1.7, busy.others_cores, 0.0, ncpu=2)
    assert not interference.disturbed(1.7, busy.others_cores, 0.0, ncpu=16)
    assert not interference.disturbed(1.7, 0.05, 0.0, ncpu=2)  # a daemon's tick
    assert interference.disturbed(0.5, 0.0, 0.2, ncpu=16)  # the hypervisor took a fifth


MATRIX = """\
benchmark:
  image_size: 32
  repeats: 2
  {extra}
axes:
  policy: [float32, mixed_bfloat16, mixed_float16]
  batch_size: [4, 8]
hosts:
  - name: box
    engine: local
"""


def test_a_family_of_comparisons_becomes_one_process_led_by_float32() -> None:
    """Every batch size of a comparison in one process per repeat: the framework's start
    paid once per process; float32 leads each batch size's policies in the same order."""
    cells = expand(parse_matrix(MATRIX.format(extra="")))
    procs = pair_up(cells)
    assert len(procs) == 2 and len(cells) == 12
    policies = ["float32", "mixed_bfloat16", "mixed_float16"]
    for p in procs:
        assert [(c.params.policy, c.params.batch_size) for c in p.arms] == [
            (x, b) for b in (4, 8) for x in policies
        ]
        assert {c.params.repeat for c in p.arms} == {p.params.repeat}
        assert p.bench_args()[-4:] == [
            "--pair-with", "mixed_bfloat16,mixed_float16", "--with-batch-sizes", "8"
        ]  # fmt: skip
        assert p.timeout_s == 2 * cells[0].timeout_s  # the process's: two comparisons
    assert [p.params.repeat for p in procs] == [0, 1]  # repeats in order
    assert sorted(c.key for p in procs for c in p.arms) == sorted(c.key for c in cells)
    other = expand(parse_matrix(MATRIX.format(extra="").replace("[4, 8]", "[4]")))
    other += expand(parse_matrix(MATRIX.format(extra="warmup_steps: 3").replace("[4, 8]", "[4]")))
    orders = {tuple(p.params.warmup_steps for p in pair_up(other)) for _ in range(40)}
    assert len(orders) > 1  # the processes of a repeat run in a random order


def test_a_family_joins_the_repeats_that_remain_and_splits_other_policies() -> None:
    """``repeats: auto`` adds a process to the comparisons still undecided, whatever
    repeat each is at: one process for all of them; a batch size whose policies differ
    is a process of its own."""
    cells = expand(parse_matrix(MATRIX.format(extra="")))
    late = [c for c in cells if (c.params.batch_size, c.params.repeat) in ((4, 1), (8, 0))]
    (proc,) = pair_up(late)
    assert {(c.params.batch_size, c.params.repeat) for c in proc.arms} == {(4, 1), (8, 0)}
    fewer = [c for c in cells if c.params.repeat == 0]
    fewer = [c for c in fewer if c.params.batch_size == 4 or c.params.policy != "mixed_float16"]
    procs = sorted(pair_up(fewer), key=lambda p: p.params.batch_size)
    assert [[c.params.policy for c in p.arms] for p in procs] == [
        ["float32", "mixed_bfloat16", "mixed_float16"], ["float32", "mixed_bfloat16"]
    ]  # fmt: skip
    assert all("--with-batch-sizes" not in p.bench_args() for p in procs)


def test_what_cannot_be_paired_stays_one_policy_per_process() -> None:
    for extra in ("pairing: process", "steps_per_execution: 2\n  steps: 4\n  warmup_steps: 2"):
        cells = expand(parse_matrix(MATRIX.format(extra=extra)))
        assert pair_up(cells) == cells  # the plan as it was, in its order
    cells = [
        c for c in expand(parse_matrix(MATRIX.format(extra=""))) if c.params.policy != "float32"
    ]
    assert all(not p.partners for p in pair_up(cells))  # no float32: nothing to pair with


def test_resume_measures_a_paired_process_again_when_an_arm_is_missing() -> None:
    cells = expand(parse_matrix(MATRIX.format(extra="")))
    done = {c.key for c in cells if c.params.policy == "float32" and c.params.batch_size == 4}
    left = to_run(cells, done)
    assert {c.params.batch_size for c in left} == {4, 8}
    assert len(left) == len(cells)  # the bs=4 processes lost their other arms: whole again
    everything = {c.key for c in cells}
    assert to_run(cells, everything) == []


def _process(ratio: float, rng: random.Random, rounds: int = 16, sd: float = 0.08) -> Any:
    return stats.paired_process([ratio * math.exp(rng.gauss(0, sd)) for _ in range(rounds)])


def test_one_paired_process_is_an_interval_over_its_rounds_and_no_verdict() -> None:
    """(Whether the intervals of several hold their level, on processes with their own effects
    and drift: tests/test_paired_interval.py.)"""
    rng = random.Random(2026)
    one = stats.judge_paired([[_process(1.3, rng)]])[0]
    assert one is not None and not one.judged and one.verdict == stats.TOO_FEW
    assert one.over == "steps" and one.low < 1.3 < one.high


def test_disturbed_rounds_are_left_out_when_enough_are_clean() -> None:
    ratios = [1.3] * 6 + [3.0] * 6
    clean = [True] * 6 + [False] * 6
    got = stats.paired_process(ratios, clean)
    assert got is not None and got[0] == pytest.approx(1.3)
    few = stats.paired_process(ratios, [True] * 2 + [False] * 10)  # too few clean: all rounds
    assert few is not None and few[0] > 1.3


TINY = """\
benchmark:
  image_size: 32
  warmup_steps: 1
  steps: 300
  timed_s: 1
  profile: "off"
  repeats: 1
axes:
  policy: [float32, mixed_bfloat16]
  batch_size: [4, 6]
hosts:
  - name: box
    engine: local
"""


def mxbench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mxbench", *args], capture_output=True,
                          text=True, timeout=600)  # fmt: skip


@pytest.mark.slow
def test_a_paired_run_end_to_end_resumes_and_measures_its_noise_floor(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    matrix = tmp_path / "m.yaml"
    matrix.write_text(TINY)
    results = tmp_path / "results"
    proc = mxbench("run", "-m", str(matrix), "-r", str(results))
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = [json.loads(x) for x in (results / "box.jsonl").read_text().splitlines()]
    assert [(r["params"]["policy"], r["params"]["batch_size"]) for r in recs] == [
        ("float32", 4), ("mixed_bfloat16", 4), ("float32", 6), ("mixed_bfloat16", 6)
    ]  # fmt: skip
    assert len({r["pairing"]["group"] for r in recs}) == 1  # one process
    assert len({r["run"]["wall_s"] for r in recs}) == 1
    assert "time to answer: 1 process(es)" in proc.stderr
    # batch 6's policy record lost: --resume measures batch 6's comparison again, alone
    kept = recs[:3]
    (results / "box.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    again = mxbench("run", "-m", str(matrix), "-r", str(results), "--resume")
    assert again.returncode == 0, again.stderr[-3000:]
    after = [json.loads(x) for x in (results / "box.jsonl").read_text().splitlines()]
    assert [(r["params"]["policy"], r["params"]["batch_size"]) for r in after[3:]] == [
        ("float32", 6), ("mixed_bfloat16", 6)
    ]  # fmt: skip
    assert (
        after[3]["pairing"]["group"] == after[4]["pairing"]["group"] != recs[0]["pairing"]["group"]
    )
    report = mxbench("report", "--results", str(results), "--markdown")
    assert report.returncode == 0 and "mixed_bfloat16" in report.stdout
    # the A/A noise floor: float32 against itself, saved, and read by compare
    noise = mxbench("doctor", "-m", str(matrix), "--noise", "1", "-r", str(results))
    assert noise.returncode == 0, noise.stderr[-3000:]
    assert "noise floor from 1 A/A process(es)" in noise.stdout
    floor = json.loads((results / "noise" / "box.json").read_text())
    assert floor["processes"] == 1 and floor["window"] is not None and floor["window"] > 0
    assert floor["params"]["policy"] == "float32"
    cmp = mxbench("compare", str(results), str(results))
    assert "Measured noise floor per process (mxbench doctor --noise): box ±" in cmp.stdout
    assert msgspec.json.decode((results / "noise" / "box.json").read_bytes())["host"] == "box"


def test_a_gpu_window_with_another_process_or_throttling_is_disturbed() -> None:
    """NVML cannot exist here: its readings are given to the sampler (the thinnest seam),
    and the windows of a paired record are marked from them, the rounds' cleanliness too."""
    from mxbench.bench.evidence.gpu_health import HealthSampler
    from mxbench.bench.process.paired import _gpu_windows, _mark_rounds
    from mxbench.bench.process.state import Process
    from mxbench.bench.process.timing import Phases
    from mxbench.matrix.params import Params
    from mxbench.records.record import Device, Interference, Pairing, Record, Window

    sampler = HealthSampler(object(), interval_s=0.1)
    sampler.samples = [(0.05, {"GPU-1": {"procs": 1, "throttle": 0x1}}),  # idle: not a reason
                       (1.05, {"GPU-1": {"procs": 2, "throttle": 0}}),  # someone else came
                       (2.05, {"GPU-1": {"procs": 1, "throttle": 0x4}})]  # power cap  # fmt: skip
    assert sampler.window(0.0, 0.5, "GPU-1") == (0, [])
    assert sampler.window(1.0, 1.5, "GPU-1") == (1, [])
    assert sampler.window(2.0, 2.5, "GPU-1") == (0, ["sw_power_cap"])

    def rec(policy: str, ratios: list[float]) -> Record:
        windows = [Window(round=i, position=0, steps=5, ms=2.0, start_s=float(i),
                          interference=Interference()) for i in range(3)]  # fmt: skip
        return Record(cell=policy, host="h", params=Params(policy=policy), status="ok",
                      device=Device(kind="gpu", uuid="GPU-1"),
                      pairing=Pairing(group="g", ratios=ratios, windows=windows,
                                      interference=Interference()))  # fmt: skip

    recs = [rec("float32", []), rec("mixed_bfloat16", [1.5, 1.6, 1.4])]
    spans = [(0.0, 0.5), (1.0, 1.5), (2.0, 2.5)]
    state = Process(Phases(0.0), util=sampler)
    state.spans = {"float32": spans, "mixed_bfloat16": spans}
    for r in recs:
        _gpu_windows(r, state)
    _mark_rounds(recs)
    arm = recs[1].pairing
    assert arm is not None and arm.clean == [True, False, False]
    assert [w.interference.gpu_others for w in arm.windows] == [0, 1, 0]
    assert arm.windows[2].interference.throttle_reasons == ["sw_power_cap"]
    assert arm.disturbed_share == pytest.approx(2 / 3, abs=1e-3)
    assert arm.interference is not None and arm.interference.throttle_reasons == ["sw_power_cap"]


def line(policy: str, batch_size: int = 4) -> str:
    """A record line as a paired process prints it."""
    from mxbench.matrix.params import Params
    from mxbench.records.codec import encode
    from mxbench.records.record import Metrics, Record, StepStats

    step = StepStats(median=10.0, p25=9.0, p75=11.0, min=8.0, max=12.0, n=3,
                     samples=[9.0, 10.0, 11.0])  # fmt: skip
    rec = Record(params=Params(policy=policy, batch_size=batch_size), status="ok",
                 metrics=Metrics(step_ms=step, images_per_s=batch_size * 100.0))  # fmt: skip
    return encode(rec).decode()


def test_a_paired_process_output_is_taken_arm_by_arm_in_order() -> None:
    """Each arm's record is the one printed in its place; the orchestrator stamps params as
    always. A record missing, or records out of order, fail the arms with why; a process
    that printed nothing fails them with its exit code."""
    from mxbench.engines import Outcome, to_records

    proc = pair_up(expand(parse_matrix(MATRIX.format(extra="").replace("[4, 8]", "[4]"))))[0]

    arms = [c.params.policy for c in proc.arms]
    good = "\n".join(line(p) for p in arms)
    got = to_records(proc, Outcome(0, stdout="log line\n" + good, wall_s=5.0))
    assert [(c.params.policy, r.status, r.params.policy) for c, r in got] == [
        (p, "ok", p) for p in arms
    ]
    assert all(r.cell == c.key for c, r in got)
    swapped = "\n".join(line(p) for p in [*arms[1:], arms[0]])  # every arm out of place
    bad = to_records(proc, Outcome(0, stdout=swapped, wall_s=5.0))
    assert all(r.status == "error" and "not" in (r.error or "") for _, r in bad)
    short = to_records(proc, Outcome(0, stdout=line(arms[0]), wall_s=5.0))
    assert all("printed 1 record(s) for 3 policies" in (r.error or "") for _, r in short)
    crashed = to_records(proc, Outcome(1, stdout="", stderr="Segmentation fault", wall_s=1.0))
    assert all("exit code 1" in (r.error or "") for _, r in crashed)


def test_a_family_process_keeps_the_passes_it_finished() -> None:
    """A process of two batch sizes: each batch size's records by position among that batch
    size's (the passes ran in either order); a pass followed by another stands when the
    process then fails, the unfinished pass's arms fail with the process's end."""
    from mxbench.engines import Outcome, to_records

    proc = pair_up(expand(parse_matrix(MATRIX.format(extra=""))))[0]
    arms = [(c.params.policy, c.params.batch_size) for c in proc.arms]
    eight, four = [a for a in arms if a[1] == 8], [a for a in arms if a[1] == 4]
    both = "\n".join(line(*a) for a in [*eight, *four])  # batch 8's pass ran first
    got = to_records(proc, Outcome(0, stdout=both, wall_s=9.0))
    assert [(c.params.policy, c.params.batch_size, r.status) for c, r in got] == [
        (*a, "ok") for a in arms
    ]
    assert all(r.params.batch_size == c.params.batch_size for c, r in got)
    died = "\n".join(line(*a) for a in [*eight, four[0]])  # killed in batch 4's pass
    cut = to_records(proc, Outcome(None, stdout=died, wall_s=9.0, timed_out=True))
    status = {(c.params.policy, c.params.batch_size): r for c, r in cut}
    assert all(status[a].status == "ok" for a in eight)
    assert all(status[a].status == "timeout" for a in four)
    last = to_records(proc, Outcome(None, stdout="\n".join(line(*a) for a in eight),
                                    wall_s=9.0, timed_out=True))  # fmt: skip
    assert all(r.status == "timeout" for _, r in last)  # nothing after it: the end says


@pytest.mark.parametrize("n", [2, 3, 4])
def test_the_order_is_balanced_in_every_block_and_still_random(n: int) -> None:
    """Over each block of n rounds every arm holds every position once (independent
    shuffles per round did not: 2 arms, 10 rounds gave A first 7 times in one run); the
    blocks differ from seed to seed."""
    rng = random.Random(3)
    orders = windows.balanced_orders(n, rng)
    rounds = [next(orders) for _ in range(n * 30)]
    for b in range(0, len(rounds), n):
        block = rounds[b : b + n]
        assert all(sorted(r) == list(range(n)) for r in block)
        for pos in range(n):
            assert sorted(r[pos] for r in block) == list(range(n)), block
    # random: the blocks' first rounds differ (not one fixed cycle)
    assert len({tuple(rounds[b]) for b in range(0, len(rounds), n)}) > 1
