"""The Slurm engine's pure parts: commands, job script, parsing the controller's answers.

These need no cluster. What a real cluster does with them is in tests/test_slurm.py; the
container runtimes (pyxis, Apptainer) cannot run here, so their argv is checked here.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mxbench.cells.cell import expand
from mxbench.engines.slurm import SlurmEngine
from mxbench.engines.slurm_script import (
    RUN_BENCH,
    bench_command,
    job_script,
    sbatch_directives,
    time_limit,
)
from mxbench.engines.slurm_states import (
    TaskState,
    parse_sacct,
    parse_scontrol,
    state_reason,
    task_ids,
)
from mxbench.errors import UsageError
from mxbench.matrix.file import parse_matrix

BASE = """
benchmark: {image_size: 32, steps: 2, warmup_steps: 1, timeout_s: 125, repeats: 1}
axes: {policy: [float32, mixed_float16], batch_size: [8]}
hosts:
  - name: gpu-cluster
    engine: slurm
"""


def _host(extra: str = ""):
    mx = parse_matrix(BASE + "".join(f"    {line}\n" for line in extra.splitlines() if line))
    return mx, mx.hosts[0], expand(mx)


def test_default_runs_the_interpreter_running_mxbench() -> None:
    _, host, cells = _host()
    argv = bench_command(host, cells[0])
    assert argv[:4] == [sys.executable, "-m", "mxbench", "bench"]
    assert argv[4:] == cells[0].bench_args()


def test_python_on_the_shared_filesystem() -> None:
    _, host, cells = _host("python: /shared/venv/bin/python")
    assert bench_command(host, cells[0])[:3] == ["/shared/venv/bin/python", "-m", "mxbench"]


def test_pyxis_container_is_the_default_runtime() -> None:
    _, host, cells = _host("container_image: /shared/images/mxbench-gpu.sqsh")
    argv = bench_command(host, cells[1])
    assert argv[:4] == [
        "srun",
        "--ntasks=1",
        "--container-image=/shared/images/mxbench-gpu.sqsh",
        "mxbench",
    ]
    assert argv[4] == "bench" and "mixed_float16" in argv


def test_apptainer_passes_gpus_with_nv_only_when_the_job_has_gpus() -> None:
    _, host, cells = _host("container_image: /shared/mxbench.sif\ncontainer_runtime: apptainer")
    assert bench_command(host, cells[0])[:4] == [
        "apptainer",
        "exec",
        "/shared/mxbench.sif",
        "mxbench",
    ]
    _, gpu_host, _ = _host(
        "container_image: /shared/mxbench.sif\ncontainer_runtime: apptainer\ngres: gpu:v100:1"
    )
    assert bench_command(gpu_host, cells[0])[:5] == [
        "apptainer",
        "exec",
        "--nv",
        "/shared/mxbench.sif",
        "mxbench",
    ]


def test_sbatch_directives_carry_every_host_option(tmp_path: Path) -> None:
    _, host, cells = _host(
        "partition: gpu\ngres: gpu:v100:1\nconstraint: volta\naccount: proj42\n"
        "time_limit: '00:30:00'\nsbatch_options: ['--qos=high', '--mem 16G', '--exclusive']"
    )
    opts = sbatch_directives(host, cells, tmp_path, "a0", array=True)
    assert f"--output={tmp_path}/a0-%a.out" in opts
    assert f"--error={tmp_path}/a0-%a.err" in opts
    for opt in (
        "--array=0-1",
        "--partition=gpu",
        "--gres=gpu:v100:1",
        "--constraint=volta",
        "--account=proj42",
        "--time=00:30:00",
        "--job-name=mxbench-gpu-cluster",
        "--qos=high",
        "--exclusive",
    ):
        assert opt in opts
    assert opts[opts.index("--mem") + 1] == "16G"  # one option written with a space
    single = sbatch_directives(host, cells[:1], tmp_path, "c3", array=False)
    assert not any(o.startswith("--array") for o in single)
    assert f"--output={tmp_path}/c3-0.out" in single


def test_memory_limit_is_sbatch_mem_in_mib_rounded_up(tmp_path: Path) -> None:
    mx = parse_matrix(
        "hosts:\n  - {name: c, engine: slurm, memory_limit: 1.5g}\n"
        "  - {name: d, engine: slurm, memory_limit: '10000000'}\n"
    )
    cells = expand(mx)
    for host, mem in zip(mx.hosts, ("--mem=1536M", "--mem=10M"), strict=True):
        opts = sbatch_directives(
            host, [c for c in cells if c.host == host.name], tmp_path, "a", True
        )
        assert mem in opts


def test_time_limit_defaults_to_the_cell_timeout_in_whole_minutes() -> None:
    _, host, cells = _host()
    assert time_limit(host, cells) == "3"  # 125 s -> 3 minutes
    _, host, _ = _host("time_limit: '1-00:00:00'")
    assert time_limit(host, cells) == "1-00:00:00"


def test_job_script_selects_the_cell_of_its_array_task(tmp_path: Path) -> None:
    _, host, cells = _host("env: {TF_ENABLE_ONEDNN_OPTS: '0', ODD: \"it's\"}")
    script = job_script(host, cells, tmp_path, "a0", array=True)
    path = tmp_path / "job.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0
    assert "#SBATCH --array=0-1" in script
    assert "export TF_ENABLE_ONEDNN_OPTS=0" in script
    # Run the script's selection logic for real, with `echo` in place of the interpreter:
    # task 1 must get cell 1's arguments and leave its exit code.
    fake = script.replace(sys.executable, "echo")
    path.write_text(fake)
    env = {"SLURM_ARRAY_TASK_ID": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True)
    assert out.returncode == 0
    assert out.stdout.split() == ["-m", "mxbench", "bench", *cells[1].bench_args()]
    assert (tmp_path / "a0-1.rc").read_text().strip() == "0"
    env["SLURM_ARRAY_TASK_ID"] = "7"
    out = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True)
    assert out.returncode == 2 and "no cell for task 7" in out.stderr


# A bench that shrugs off SIGTERM (noting it) and runs until it is killed.
STUBBORN = """#!/bin/sh
echo $$ > "{pid}"
trap 'echo TERM >> "{log}"' TERM
while :; do sleep 0.1; done
"""


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's reaper may be slow to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def _default_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def test_the_job_script_keeps_its_bench_and_passes_on_an_ending_signal(tmp_path: Path) -> None:
    # Slurm (proctrack/linuxproc) finds a job's processes by their parents: the script must
    # stay the bench's parent whatever signal it gets, pass the signal on, and take the
    # bench with it if it is killed alone (issue 47: a cancelled job's bench ran on).
    pid_file, log = tmp_path / "bench.pid", tmp_path / "bench.log"
    fake = tmp_path / "bench"
    fake.write_text(STUBBORN.format(pid=pid_file, log=log))
    fake.chmod(0o755)
    _, host, cells = _host(f"python: {fake}")
    path = tmp_path / "job.sh"
    path.write_text(job_script(host, cells, tmp_path, "a0", array=True))
    env = {"SLURM_ARRAY_TASK_ID": "0", "PATH": "/usr/bin:/bin"}
    # as slurmstepd starts a job: default dispositions (a CI runner that started the suite
    # in the background hands it SIGINT and SIGQUIT ignored, and bash cannot undo that)
    script = subprocess.Popen(["bash", str(path)], env=env, preexec_fn=_default_signals)
    bench = 0
    try:
        deadline = time.monotonic() + 10
        while not pid_file.exists() or not pid_file.read_text().strip():
            assert time.monotonic() < deadline and script.poll() is None
            time.sleep(0.05)
        bench = int(pid_file.read_text())
        status = Path(f"/proc/{bench}/status").read_text()
        assert f"PPid:\t{script.pid}\n" in status  # the script's own child
        ignored = int(re.search(r"SigIgn:\s*(\w+)", status).group(1), 16)  # type: ignore[union-attr]
        assert not ignored & (1 << (signal.SIGINT - 1) | 1 << (signal.SIGQUIT - 1))

        script.send_signal(signal.SIGTERM)  # to the script alone (scancel -b, --signal=B:)
        while not log.exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert log.read_text() == "TERM\n"  # passed on
        time.sleep(0.3)
        assert script.poll() is None and _running(bench)  # still waiting for its bench

        if shutil.which("setpriv"):
            script.kill()  # the script alone: its bench goes with it
            script.wait(5)
            deadline = time.monotonic() + 5
            while _running(bench):
                assert time.monotonic() < deadline, "the bench outlived its script"
                time.sleep(0.05)
        assert not (tmp_path / "a0-0.rc").exists()  # signalled: the job's state says
    finally:
        script.kill()
        if bench and _running(bench):
            os.kill(bench, signal.SIGKILL)


# Captured from this repository's one-node cluster (.ci/setup-slurm.sh), trimmed.
SCONTROL = (
    "JobId=12 ArrayJobId=10 ArrayTaskId=2 JobName=mxbench-c JobState=TIMEOUT Reason=TimeLimit "
    "ExitCode=0:15 RunTime=00:01:16 TimeLimit=00:01:00 NodeList=vm NumCPUs=1 Command=/tmp/a b.sh\n"
    "JobId=10 ArrayJobId=10 ArrayTaskId=3-5%2 JobName=mxbench-c JobState=PENDING "
    "Reason=JobArrayTaskLimit ExitCode=0:0 RunTime=00:00:00 TimeLimit=00:01:00 "
    "NodeList=(null)\n"
)


def test_parse_scontrol_expands_pending_task_ranges() -> None:
    states = parse_scontrol(SCONTROL)
    assert sorted(k for k in states if k is not None) == [2, 3, 4, 5]
    assert states[2].state == "TIMEOUT" and states[2].run_s == 76.0
    assert states[2].returncode == -15 and states[2].job_id == "10_2" and states[2].cpus == 1
    assert states[4].state == "PENDING" and states[4].node == ""
    plain = parse_scontrol("JobId=7 JobName=x JobState=COMPLETED ExitCode=3:0 RunTime=1-00:00:02")
    assert plain[None].returncode == 3 and plain[None].run_s == 86402.0


def test_task_id_specs() -> None:
    assert task_ids("0-3,7") == [0, 1, 2, 3, 7]
    assert task_ids("1-9:4%2") == [1, 5, 9]


def test_parse_sacct_lines() -> None:
    text = (
        "55_0|COMPLETED|0:0|node1|31|00:10:00\n"
        "55_1|CANCELLED by 1000|0:15|node2|4|00:10:00\n"
        "55_[2-9]|PENDING|0:0|None assigned|0|00:10:00\n"
    )
    states = parse_sacct(text)
    assert set(states) == {0, 1}
    assert states[1].state == "CANCELLED" and states[1].run_s == 4.0


@pytest.mark.parametrize(
    ("state", "words"),
    [
        ("NODE_FAIL", "lost with its node"),
        ("CANCELLED", "cancelled"),
        ("PREEMPTED", "preempted"),
        ("TIMEOUT", "time limit (00:01:00)"),
    ],
)
def test_state_reasons_name_the_state(state: str, words: str) -> None:
    st = TaskState("9_1", state, "0:9", reason="None", node="n1", time_limit="00:01:00")
    reason = state_reason(st, -9)
    assert words in reason and f"state {state}" in reason and "9_1" in reason


def test_bad_poll_interval_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    mx, host, _ = _host()
    monkeypatch.setenv("MXBENCH_SLURM_POLL_S", "soon")
    with pytest.raises(UsageError, match="MXBENCH_SLURM_POLL_S"):
        SlurmEngine(host, mx)
    monkeypatch.setenv("MXBENCH_SLURM_POLL_S", "0.5")
    assert SlurmEngine(host, mx).poll_s == 0.5


def test_the_worked_example_in_the_docs_is_a_valid_matrix(repo_root: Path, tmp_path: Path) -> None:
    text = (repo_root / "docs" / "clusters.md").read_text()
    example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    mx = parse_matrix(example, "docs/clusters.md")
    cells = expand(mx)
    assert len(cells) == 3 * 2 * 5 * 2  # the count the doc's --dry-run line announces
    assert "60 cells" in text
    by_host = {h.name: h for h in mx.hosts}
    v100 = sbatch_directives(by_host["hpc-v100"], cells[:10], tmp_path, "a0", True)
    assert "--gres=gpu:v100:1" in v100 and "--cpus-per-task=8" in v100
    assert bench_command(by_host["hpc-v100"], cells[0])[0] == "/shared/envs/mxbench/bin/python"
    assert bench_command(by_host["hpc-a100"], cells[10])[0] == "srun"
    assert bench_command(by_host["uni-t4"], cells[20])[:3] == ["apptainer", "exec", "--nv"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("time_limit: '30 min'", "hosts[0].time_limit: '30 min' is not a Slurm time"),
        ('sbatch_options: ["--qos \'high"]', 'hosts[0].sbatch_options: "--qos \'high": No closing'),
        ("sbatch_options: [exclusive]", "each item is one sbatch option"),
    ],
)
def test_bad_slurm_host_keys_are_matrix_errors(line: str, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        _host(line)


@pytest.mark.parametrize("limit", ["30", "10:00", "01:30:00", "2-00", "1-12:00:00", "UNLIMITED"])
def test_slurm_time_formats_are_accepted(limit: str) -> None:
    _, host, _ = _host(f"time_limit: '{limit}'")
    assert host.time_limit == limit


_TEXT = st.text(max_size=30)


@pytest.mark.process
@settings(max_examples=200, deadline=None)
@given(
    partition=st.none() | _TEXT, gres=st.none() | _TEXT, constraint=st.none() | _TEXT,
    account=st.none() | _TEXT, workdir=_TEXT.filter(bool),
    sbatch_options=st.lists(_TEXT, max_size=3),
    env=st.dictionaries(_TEXT, _TEXT, max_size=3),
    python=st.none() | _TEXT, container_image=st.none() | _TEXT,
)  # fmt: skip
def test_no_input_can_add_a_line_to_the_job_script(**fields: object) -> None:
    _, host, cells = _host()
    # model_construct skips the matrix's own validation: this is the builder's guarantee.
    hostile = type(host).model_construct(**{**host.model_dump(), **fields})
    run_dir = Path(str(fields["workdir"]))
    try:
        opts = sbatch_directives(hostile, cells, run_dir, "a0", array=True)
        script = job_script(hostile, cells, run_dir, "a0", array=True)
    except ValueError:  # refused (a control character, a bad env name, unbalanced quotes)
        return
    lines = script.splitlines()
    env = fields["env"]
    assert isinstance(env, dict)
    # shebang, #SBATCH lines, comment, PYTHONUNBUFFERED, exports, task=, case, one line per
    # cell, default case, esac, the lines that run the bench, echo rc, exit
    fixed = 1 + 2 + 2 + 2 + len(RUN_BENCH) + 2
    assert len(lines) == len(opts) + len(env) + len(cells) + fixed
    assert sum(line.startswith("#SBATCH ") for line in lines) == len(opts)
    check = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def _scaled(gres: str) -> tuple[object, list]:
    mx = parse_matrix(
        "version: 1\nbenchmark: {backend: jax, image_size: 32}\n"
        "axes: {devices: [1, 2], nodes: [1, 2]}\n"
        f"hosts: [{{name: g, engine: slurm, python: /p, tasks_per_node: 2, gres: '{gres}'}}]\n"
    )
    return mx, expand(mx)


@pytest.mark.parametrize(
    ("gres", "per_cell"),
    [  # (devices, nodes) -> --gres: devices x the tasks on a node (tasks_per_node 2)
        ("gpu:a100:1", {(1, 1): "gpu:a100:1", (2, 1): "gpu:a100:2", (2, 2): "gpu:a100:4"}),
        ("gpu:8", {(1, 1): "gpu:1", (1, 2): "gpu:2", (2, 2): "gpu:4"}),
        ("gpu,nvme:1", {(1, 1): "gpu:1,nvme:1", (2, 1): "gpu:2,nvme:1"}),
        ("gpu:a100:2(S:0)", {(2, 2): "gpu:a100:2(S:0)"}),  # a form not ours: as written
        ("nvme:1", {(2, 2): "nvme:1"}),  # no GPUs: the devices are the host's split
    ],
)
def test_each_cell_asks_for_its_own_gpus(
    tmp_path: Path, gres: str, per_cell: dict[tuple[int, int], str]
) -> None:
    """devices: N on a Slurm host with a gpu gres asks --gres=gpu:N per task on a node; the
    host's gres names the kind. Cells that ask differently go in different job arrays."""
    mx, cells = _scaled(gres)
    host = mx.hosts[0]  # type: ignore[attr-defined]
    by = {(c.params.devices, c.params.nodes): c for c in cells}
    for key, want in per_cell.items():
        opts = sbatch_directives(host, [by[key]], tmp_path, "a0", array=True)
        assert [o for o in opts if o.startswith("--gres")] == [f"--gres={want}"], key

    def asks(group: list) -> list[str]:
        opts = sbatch_directives(host, group, tmp_path, "x", True)
        return [o for o in opts if o.startswith(("--gres", "--ntasks"))]

    subs = SlurmEngine(host, mx)._plan(cells)
    for sub in subs:  # a job array asks what each of its cells asks
        group = list(sub.cells.values())
        assert all(asks([c]) == asks(group) for c in group), asks(group)
    assert len(subs) == len({tuple(asks([c])) for c in cells})  # one array per shape


def test_several_tasks_in_a_container_start_in_block_order() -> None:
    mx = parse_matrix(
        "version: 1\nbenchmark: {backend: tensorflow}\naxes: {nodes: [2]}\n"
        "hosts: [{name: c, engine: slurm, container_image: /i.sqsh, tasks_per_node: 2}]\n"
    )
    argv = bench_command(mx.hosts[0], expand(mx)[0])  # type: ignore[arg-type]
    assert argv[:5] == [
        "srun", "--ntasks=2", "--kill-on-bad-exit=1", "--distribution=block",
        "--container-image=/i.sqsh",
    ]  # fmt: skip


def _fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **commands: str) -> None:
    """Slurm's commands on PATH as the given shell bodies (the rest: not found)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in commands.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")


RUNNING = (
    "JobId=43 ArrayJobId=42 ArrayTaskId={t} JobName=mxbench-c JobState=RUNNING Reason=None "
    "ExitCode=0:0 RunTime=00:00:05 TimeLimit=00:03:00 NodeList=vm NumCPUs=1 Command=/tmp/a.sh"
)


@pytest.mark.process
def test_ctrl_c_returns_in_seconds_when_the_controller_does_not_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A controller that neither answers scancel in time nor ever reports the jobs ended:
    # cancel() returns after its bound, and the watch stops within that bound too.
    _fake_slurm(
        tmp_path,
        monkeypatch,
        sbatch="echo 42",
        scancel="sleep 3",
        scontrol=f"echo '{RUNNING.format(t=0)}'; echo '{RUNNING.format(t=1)}'",
    )
    mx, host, cells = _host(f"workdir: {tmp_path / 'work'}")
    engine = SlurmEngine(host, mx)
    engine.poll_s, engine.cancel_wait_s = 0.2, 0.5
    outcomes: list[object] = []
    watch = threading.Thread(target=lambda: outcomes.extend(engine.run(cells)), daemon=True)
    watch.start()
    deadline = time.monotonic() + 10
    while engine.progress.running < len(cells):
        assert time.monotonic() < deadline and watch.is_alive(), engine.progress_note()
        time.sleep(0.05)
    t0 = time.monotonic()
    engine.cancel()
    assert time.monotonic() - t0 < 2  # not the 3 s scancel takes
    watch.join(5)
    assert not watch.is_alive(), "still watching jobs it cancelled"
    assert time.monotonic() - t0 < 4
    assert outcomes == []  # nothing ended: nothing to record
    # the fake scancel the bound left behind ends in its 3 s, before the test does
    fakes = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if str(tmp_path) in " ".join(proc.cmdline()):
                fakes += [proc, *proc.children(recursive=True)]
    psutil.wait_procs(fakes, timeout=10)
