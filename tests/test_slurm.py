"""`engine: slurm` against a real Slurm controller (slurmctld + slurmd + munge on this host).

`.ci/setup-slurm.sh` starts the one-node cluster. Every test runs the real `mxbench bench`
(TensorFlow, image 32 px, 2 steps) as Slurm jobs; the time-limit test waits for Slurm to
kill a job at its one-minute limit (about 75 s: the controller checks limits every 30 s).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from mxbench.cells.cell import expand
from mxbench.matrix.file import parse_matrix

from conftest import require_service, slurm_up
from mxbench.engines import EngineUnavailable, to_record
from mxbench.engines.slurm import SlurmEngine, SlurmProgress

pytestmark = pytest.mark.slurm

TINY = "benchmark: {image_size: 32, steps: 2, warmup_steps: 1, repeats: 1}\n"
# pairing: process: one job per cell (three jobs to cancel)
LONG = (
    "benchmark: {image_size: 32, steps: 1000000, warmup_steps: 1, repeats: 1, pairing: process}\n"
)


@pytest.fixture(autouse=True)
def _slurm() -> None:
    require_service(slurm_up(), "a Slurm controller (slurmctld + slurmd + munge)")


def _name(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:6]}"


def _matrix(tmp_path: Path, bench: str, policies: str, host: str, extra: str = "") -> Path:
    text = (
        bench
        + f"axes: {{policy: [{policies}], batch_size: [8]}}\n"
        + "hosts:\n"
        + f"  - name: {host}\n    engine: slurm\n    workdir: {tmp_path / 'work'}\n"
        + "".join(f"    {line}\n" for line in extra.splitlines() if line)
    )
    path = tmp_path / "matrix.yaml"
    path.write_text(text)
    return path


def _mxbench(*args: str, cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "MXBENCH_SLURM_POLL_S": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "mxbench", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _records(results: Path, host: str) -> list[dict]:
    path = results / f"{host}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _jobs_named(name: str, states: str | None = None) -> list[str]:
    """Jobs of that name, in these states (default: the live ones, not finished)."""
    res = subprocess.run(
        ["squeue", "-h", "-r", "-n", name, "-o", "%i %T", *(["-t", states] if states else [])],
        capture_output=True,
        text=True,
        check=True,
    )
    return res.stdout.split("\n")[:-1]


def test_matrix_runs_end_to_end_and_resumes_across_submissions(tmp_path: Path) -> None:
    host = _name("e2e")
    matrix = _matrix(tmp_path, TINY, "float32, mixed_float16", host, "time_limit: '00:10:00'")
    results = tmp_path / "results"
    proc = _mxbench("run", "-m", str(matrix), "-r", str(results), cwd=tmp_path)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err

    records = _records(results, host)
    mx = parse_matrix(matrix.read_text())
    assert sorted(r["cell"] for r in records) == sorted(c.key for c in expand(mx))
    jobs = set()
    for r in records:
        assert r["status"] == "ok", r["error"]
        assert r["engine"] == "slurm" and r["host"] == host
        assert r["metrics"]["step_ms"]["n"] == 2 and r["metrics"]["step_ms"]["median"] > 0
        assert r["software"]["tensorflow"]
        slurm = r["run"]["slurm"]
        assert slurm["state"] == "COMPLETED" and slurm["exit_code"] == "0:0"
        assert slurm["cpus"] >= 1 and Path(slurm["stdout"]).is_file()
        jobs.add(slurm["job_id"].split("_")[0])
    assert len(jobs) == 1, "two cells must go as one job array"
    assert {r["params"]["policy"] for r in records} == {"float32", "mixed_float16"}

    # A wider matrix with --resume: only the new cell is submitted, in a new job.
    text = matrix.read_text().replace("batch_size: [8]", "batch_size: [8, 16]")
    matrix.write_text(text.replace("float32, mixed_float16", "float32"))
    proc = _mxbench("run", "-m", str(matrix), "-r", str(results), "--resume", cwd=tmp_path)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "(1 already done, skipped)" in err
    records = _records(results, host)
    assert len(records) == 2 + 1
    new = records[2:]
    assert all(r["status"] == "ok" for r in new), [r["error"] for r in new]
    new_jobs = {r["run"]["slurm"]["job_id"].split("_")[0] for r in new}
    assert len(new_jobs) == 1 and new_jobs.isdisjoint(jobs)


def test_ctrl_c_cancels_every_submitted_job(tmp_path: Path) -> None:
    host = _name("cancel")
    # Three long cells on a two-CPU node: two run, one waits in the queue.
    matrix = _matrix(tmp_path, LONG, "float32, mixed_float16, mixed_bfloat16", host)
    proc = _mxbench("run", "-m", str(matrix), "-r", str(tmp_path / "results"), cwd=tmp_path)
    job = f"mxbench-{host}"
    try:
        deadline = time.monotonic() + 120
        while not _jobs_named(job, "RUNNING"):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the jobs never started"
            time.sleep(0.5)
        assert len(_jobs_named(job, "all")) == 3
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "--resume" in err
    deadline = time.monotonic() + 30  # cancelled jobs pass through COMPLETING
    while _jobs_named(job) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _jobs_named(job) == []
    finished = _jobs_named(job, "all")
    assert len(finished) == 3 and all(j.endswith("CANCELLED") for j in finished), finished


def _engine(tmp_path: Path, host_extra: str, policies: str = "float32"):
    workdir = "" if "workdir:" in host_extra else f"workdir: {tmp_path}, "
    mx = parse_matrix(
        TINY + f"axes: {{policy: [{policies}], batch_size: [8]}}\nhosts:\n"
        f"  - {{name: {_name('eng')}, engine: slurm, {workdir}{host_extra}}}\n"
    )
    engine = SlurmEngine(mx.hosts[0], mx)
    engine.poll_s = 0.5
    return engine, expand(mx)


def test_memory_kill_is_oom_and_a_failing_bench_is_an_error(tmp_path: Path) -> None:
    # TensorFlow alone needs far more than 150 MB: Slurm kills the job for memory.
    engine, cells = _engine(tmp_path, "sbatch_options: ['--mem=150M']")
    seen: list[SlurmProgress] = []
    engine.on_progress = lambda p: seen.append(SlurmProgress(p.total, p.queued, p.running, p.done))
    engine.prepare(cells)
    [(cell, outcome)] = list(engine.run(cells))
    record = to_record(cell, outcome)
    assert record.status == "oom", record.error
    assert "exceeding its memory" in (record.error or "")
    assert seen[-1].done == 1 and seen[-1].queued == seen[-1].running == 0
    assert engine.progress_note().endswith("1/1 done")

    # An interpreter that exits 1 without a record: state FAILED, named in the error.
    engine, cells = _engine(tmp_path, "python: /bin/false")
    [(cell, outcome)] = list(engine.run(cells))
    record = to_record(cell, outcome)
    assert record.status == "error"
    assert "failed with exit code 1 (state FAILED" in (record.error or "")
    assert record.run["slurm"]["exit_code"] == "1:0"


def test_cells_as_separate_jobs_without_arrays(tmp_path: Path) -> None:
    engine, cells = _engine(tmp_path, "array: false", policies="float32, mixed_float16")
    results = [to_record(c, o) for c, o in engine.run(cells)]
    assert [r.status for r in results] == ["ok", "ok"], [r.error for r in results]
    ids = [r.run["slurm"]["job_id"] for r in results]
    assert all("_" not in i for i in ids) and len(set(ids)) == 2


def test_prepare_names_what_the_cluster_rejects(tmp_path: Path) -> None:
    engine, cells = _engine(tmp_path, "partition: no-such-partition")
    with pytest.raises(EngineUnavailable, match=r"sbatch rejects the job.*[Pp]artition"):
        engine.prepare(cells)
    engine, cells = _engine(tmp_path, "gres: 'gpu:v100:1'")
    with pytest.raises(EngineUnavailable, match="sbatch rejects the job"):
        engine.prepare(cells)
    engine, cells = _engine(tmp_path, "workdir: /proc/no-such-dir")
    with pytest.raises(EngineUnavailable, match="workdir /proc/no-such-dir: cannot create it"):
        engine.prepare(cells)


def test_interrupt_inside_the_poll_loop_cancels_without_help(tmp_path: Path) -> None:
    # Ctrl-C raises KeyboardInterrupt wherever the main thread is: here, in the engine's
    # own poll loop. Leaving the generator must scancel its jobs even if nobody calls cancel().
    mx = parse_matrix(
        LONG + "axes: {policy: [float32], batch_size: [8]}\nhosts:\n"
        f"  - {{name: {_name('intr')}, engine: slurm, workdir: {tmp_path}}}\n"
    )
    engine = SlurmEngine(mx.hosts[0], mx)
    engine.poll_s = 0.5

    def interrupt_when_running(p: SlurmProgress) -> None:
        if p.running:
            raise KeyboardInterrupt

    engine.on_progress = interrupt_when_running
    with pytest.raises(KeyboardInterrupt):
        list(engine.run(expand(mx)))
    job = f"mxbench-{mx.hosts[0].name}"
    deadline = time.monotonic() + 30
    while _jobs_named(job) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _jobs_named(job) == []
    assert [j.split()[1] for j in _jobs_named(job, "all")] == ["CANCELLED"]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "tensorflow", "torch"])
def test_a_cell_of_two_processes_trains_data_parallel_as_two_tasks(
    tmp_path: Path, backend: str
) -> None:
    """nodes: 2 on the one-node CI cluster (tasks_per_node: 2): a job of two tasks, srun
    starting the bench in each; JAX: jax.distributed meeting from Slurm's variables, the
    gloo collectives on the CPU; TensorFlow: MultiWorkerMirroredStrategy from a TF_CONFIG
    each task writes from Slurm's variables, its ring all-reduce over gRPC; PyTorch: a
    torch.distributed group over gloo from torchrun's variables derived from Slurm's, the
    gradients all-reduced before the optimizer applies them. One record (the first task's)
    per cell, of a global batch of 2 x 8, against the one-process cell of the same
    per-device batch (the map's N = 1). PyTorch, one device per process, with devices: 2:
    two nodes' worth of two devices each is a job of four tasks (one node: the host's
    --overcommit puts them on its 2 CPUs), against the one task that starts its own two
    processes (bench/parallel/torch_launch.py)."""
    pytest.importorskip(backend)
    host = _name("nodes")
    torch = backend == "torch"
    steps = "steps: 3, warmup_steps: 1, devices: 2" if torch else "steps: 6, warmup_steps: 2"
    bench = (f"benchmark: {{image_size: 32, {steps}, repeats: 1, backend: {backend}, "
             "profile: 'off', check: 'off'}\n")  # fmt: skip
    extra = "tasks_per_node: 2" + ("\nsbatch_options: [--overcommit]" if torch else "")
    matrix = _matrix(tmp_path, bench, "float32", host, extra)
    matrix.write_text(
        matrix.read_text().replace("batch_size: [8]", "batch_size: [8], nodes: [1, 2]")
    )
    results = tmp_path / "results"
    proc = _mxbench("run", "-m", str(matrix), "-r", str(results), cwd=tmp_path)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    records = {r["params"]["nodes"]: r for r in _records(results, host)}
    assert sorted(records) == [1, 2], "one record per cell, not one per task"
    two = records[2]
    assert two["status"] == "ok", two["error"]
    d = two["distribution"]
    n = 4 if torch else 2  # processes of the nodes: 2 cell
    assert d["processes"] == n and d["replicas"] == n, d  # the variables on every process
    assert d["global_batch"] == 8 * n and d["per_device_batch"] == 8
    assert len(d["device_names"]) == n and d["nodes"]
    assert two["run"]["slurm"]["state"] == "COMPLETED"
    one = records[1]["distribution"]
    assert one is None if not torch else one["processes"] == 2, one
    out = subprocess.run([sys.executable, "-m", "mxbench", "report", "-r", str(results),
                          "--json"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    (scaling_map,) = json.loads(out.stdout)["scaling"]
    assert {p["devices"] for p in scaling_map["points"]} == {n // 2, n}, scaling_map
    assert d["shared_cores"]  # two tasks on the one node: one host's cores
    mechanism = {"jax": "keras.distribution.DataParallel",
                 "tensorflow": "tf.distribute.MultiWorkerMirroredStrategy",
                 "torch": "torch.distributed gradient all_reduce (gloo)"}  # fmt: skip
    assert d["mechanism"] == mechanism[backend], d
    if backend == "tensorflow":  # the workers TF_CONFIG named: the one node, two ports
        (listen,) = [n for n in d["notes"] if n.startswith("TF_CONFIG from Slurm")]
        assert listen.count(f"{d['nodes']}:") == 2, listen
    if backend == "torch":  # each process fed its own examples: without the all-reduce the
        sums = d["weight_checksums"]  # replicas' weights part (tried: 210.5 vs 229.4)
        assert len(sums) == 4 and len(set(sums)) == 1 and sums[0] != 0, sums
        assert d["allreduce_dtype"] == "float32"
