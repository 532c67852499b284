"""PyTorch on several devices of one host (issue 36): ``devices: 2`` on the torch backend is
two processes the bench starts itself, over gloo on this CPU, one record from rank 0; a rank
that fails ends the cell with its error, bounded (bench/parallel/torch_launch.py). Real torch, real
processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mxbench.bench.parallel import torch_launch
from mxbench.matrix.file import parse_matrix
from mxbench.matrix.params import Params
from mxbench.records.codec import new_record
from mxbench.records.record import Record

from mxbench.matrix import scale

SMALL = ["--backend", "torch", "--image-size", "32", "--warmup-steps", "1", "--profile", "off",
         "--check", "off"]  # fmt: skip


def bench(*args: str, timeout: float = 300) -> dict[str, Any]:
    """The record of one real bench process (its last line on stdout counts)."""
    proc = subprocess.run([sys.executable, "-m", "mxbench", "bench", *SMALL, *args],
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    record: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return record


def test_two_devices_are_two_processes_with_one_record() -> None:
    """Each rank feeds its own examples (seeded by its rank): only the all-reduce keeps the
    two replicas' weights equal (without it they part: torch_workers' docstring)."""
    r = bench("--devices", "2", "--batch-size", "8", "--steps", "3")
    assert r["status"] == "ok", r.get("error")
    d = r["distribution"]
    assert (d["devices"], d["processes"], d["replicas"]) == (2, 2, 2), d
    assert (d["global_batch"], d["per_device_batch"]) == (16, 8)
    assert d["device_names"] == ["rank0:cpu", "rank1:cpu"]
    assert d["mechanism"] == "torch.distributed gradient all_reduce (gloo)"
    assert d["versions"]["torch"] and d["versions"]["keras"]
    assert d["shared_cores"] is True and d["nodes"] is None  # plumbing: one CPU's cores
    assert "processes started by the bench" in d["notes"][0] and "127.0.0.1:" in d["notes"][0]
    threads = torch_launch.threads(2, os.environ)
    assert f"2 processes, {threads} CPU thread(s) each (OMP_NUM_THREADS {threads})" in d["notes"]
    a, b = d["weight_checksums"]
    assert a == b != 0.0
    assert d["allreduce_dtype"] == "float32"
    assert r["params"]["devices"] == 2 and r["params"]["nodes"] == 1  # the cell as asked


def test_a_rank_killed_ends_the_cell_with_its_error_not_a_hang() -> None:
    """One of the two processes killed (SIGKILL, as the out-of-memory killer does) while the
    cell runs: the bench ends within the grace and stop times with a record that names it,
    and leaves no process behind."""
    args = [*SMALL, "--devices", "2", "--batch-size", "4", "--steps", "100000"]
    command = [sys.executable, "-m", "mxbench", "bench", *args]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        ranks = _children(proc.pid, 2, within_s=60)
        time.sleep(5)  # into the import or the training: a failure either way
        os.kill(ranks[-1], signal.SIGKILL)
        killed_at = time.monotonic()
        out, _ = proc.communicate(timeout=torch_launch.GRACE_S + torch_launch.STOP_S + 30)
    finally:
        proc.kill()
    took = time.monotonic() - killed_at
    r = json.loads(out.splitlines()[-1])
    assert r["status"] == "error"
    assert r["error"].startswith("rank "), r["error"]
    assert " of 2 processes: killed by SIGKILL before its record" in r["error"], r["error"]
    assert took < torch_launch.GRACE_S + torch_launch.STOP_S + 15, took
    assert not [pid for pid in ranks if Path(f"/proc/{pid}").exists()]  # none left behind


def _children(pid: int, count: int, within_s: float) -> list[int]:
    """The bench's spawned ranks (not multiprocessing's resource tracker beside them)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        ranks = [int(c) for c in found if b"spawn_main" in _cmdline(int(c))]
        if len(ranks) >= count:
            return ranks
        time.sleep(0.2)
    raise AssertionError(f"the bench started no {count} processes in {within_s} s")


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return b""


def fails_on_rank_1(p: Params, started_at: float, emit: Any) -> Record:
    """A rank's measure (a spawned process imports it from here): rank 1 fails, by record
    or by exception as ``p.policy`` says; rank 0 hangs, as one does in a collective whose
    peer has gone."""
    rec = new_record(params=p, status="ok")
    if torch_launch.rank() != 1:
        time.sleep(600)
    if p.policy == "mixed_float16":
        raise ValueError("rank 1 raised")
    rec.status, rec.error = "error", "ValueError: rank 1's own failure"
    return rec


@pytest.mark.parametrize(
    ("policy", "why"),
    [
        ("mixed_bfloat16", "ValueError: rank 1's own failure"),  # an error record
        ("mixed_float16", "ValueError: rank 1 raised"),  # an exception out of the measure
    ],
)
def test_the_first_failure_is_the_cells_and_the_rest_are_stopped(
    policy: str, why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch_launch, "GRACE_S", 1.0)
    p = Params(backend="torch", devices=2, policy=policy)
    t0 = time.monotonic()
    rec = torch_launch.run(p, fails_on_rank_1, time.time(), lambda _rec: None)
    assert time.monotonic() - t0 < 1.0 + torch_launch.STOP_S + 30  # spawning included
    assert rec.status == "error"
    assert rec.error == f"rank 1 of 2 processes: {why}; rank(s) 0 stopped after it"


def meets_late_on_rank_1(p: Params, started_at: float, emit: Any) -> Record:
    """A rank's measure: rank 1 comes to the meeting 1 s late; each sends as its log when it
    arrived and when it left (the host's monotonic clock, one for every process)."""
    if torch_launch.rank() == 1:
        time.sleep(1)
    arrived = time.monotonic()
    torch_launch.meet()
    torch_launch.share_log((arrived, time.monotonic()))
    return new_record(params=p, status="ok")


def test_independent_ranks_leave_the_meeting_together_and_their_logs_merge() -> None:
    """The barrier of independent replicas across processes (their timed windows start
    together): nobody leaves before the last has come; every rank's log reaches the merge,
    in rank order."""
    got: list[Any] = []

    def merge(p: Params, records: list[Record], logs: list[Any], started_at: float) -> Record:
        got.extend(logs)
        return records[0]

    p = Params(backend="torch", devices=2, scaling="independent")
    rec = torch_launch.run(p, meets_late_on_rank_1, time.time(), lambda _rec: None, merge)
    assert rec.status == "ok", rec.error
    (came0, left0), (came1, left1) = got
    assert came1 - came0 > 0.5  # rank 1 was late ...
    assert min(left0, left1) >= came1  # ... and rank 0 waited for it


def test_torch_devices_are_processes_each_feeding_its_own_batch() -> None:
    """A torch process drives one device: its batch is the per-device one (a JAX or
    TensorFlow process feeds all its devices' share)."""
    torch_ = Params(backend="torch", devices=4, batch_size=8)
    jax_ = Params(backend="jax", devices=4, batch_size=8)
    assert (scale.processes(torch_), scale.process_batch(torch_)) == (4, 8)
    assert (scale.processes(jax_), scale.process_batch(jax_)) == (1, 32)
    strong = Params(backend="torch", devices=2, batch_size=8, scaling="strong")
    assert scale.process_batch(strong) == 4
    assert torch_launch.launches(torch_, {}) and not torch_launch.launches(jax_, {})
    assert not torch_launch.launches(torch_, {torch_launch.RANK_VAR: "1"})  # a launched one


def test_the_ranks_share_the_cpus_as_their_threads() -> None:
    """Each of N ranks at every CPU would oversubscribe them N times (two ranks on this
    2-core VM: 962-1290 ms/step against 149); the user's own setting is kept."""
    cpus = len(os.sched_getaffinity(0))
    assert torch_launch.threads(2, {}) == str(max(1, cpus // 2))
    assert torch_launch.threads(4 * cpus, {}) == "1"
    assert torch_launch.threads(2, {"OMP_NUM_THREADS": "3"}) == "3"


def test_a_local_host_takes_torch_devices_and_their_allreduce_dtype() -> None:
    """The matrix runs torch on N devices of a local (or Docker) host, and the all-reduce's
    dtype there, mxbench's own all-reduce."""
    m = parse_matrix(
        "version: 1\nhosts: [{name: box, engine: local}]\n"
        "benchmark: {backend: torch, devices: 2}\naxes: {allreduce: [native, bfloat16]}\n"
    )
    assert m.sweep()["devices"] == [2] and m.sweep()["allreduce"] == ["native", "bfloat16"]


def test_torch_devices_run_one_policy_per_process() -> None:
    """Their processes time their own windows: no paired process in a matrix, and
    --pair-with refused (exit 2)."""
    from mxbench.cells.cell import expand, pairable

    m = parse_matrix(
        "version: 1\nhosts: [{name: box, engine: local}]\nbenchmark: {backend: torch}\n"
        "axes: {devices: [1, 2], policy: [float32, mixed_bfloat16]}\n"
    )
    assert {c.params.devices: pairable(c) for c in expand(m)} == {1: True, 2: False}
    proc = subprocess.run(
        [sys.executable, "-m", "mxbench", "bench", *SMALL, "--devices", "2",
         "--pair-with", "mixed_bfloat16"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "torch's --devices > 1" in proc.stderr, proc.stderr


def test_a_docker_container_of_torch_ranks_on_gpus_gets_nccl_its_shared_memory() -> None:
    """NCCL between processes goes through /dev/shm, which Docker holds to 64 MB (NCCL
    crashes in ncclShmOpen there): such a container asks for more; others keep the default."""
    from docker.types import HostConfig

    from mxbench.engines.docker_container import shm_size

    torch_ = Params(backend="torch", devices=2)
    assert shm_size(["0", "1"], torch_) == "2g" and shm_size("all", torch_) == "2g"
    assert shm_size("none", torch_) is None  # gloo over loopback: no shared memory
    assert shm_size("all", Params(backend="jax", devices=2)) is None  # one process
    assert shm_size("all", Params(backend="torch")) is None
    assert HostConfig(version="1.41", shm_size="2g")["ShmSize"] == 2 * 1024**3
    assert "ShmSize" not in HostConfig(version="1.41", shm_size=None)
