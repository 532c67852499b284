"""TensorFlow's workers from Slurm's variables: the host list, tasks per node, TF_CONFIG;
PyTorch's rendezvous (torchrun's variables) from the same.

Pure functions of the environment; a real two-task job (MultiWorkerMirroredStrategy
training on the CI's Slurm cluster) is tests/test_slurm.py's."""

from __future__ import annotations

import pytest
from mxbench.bench.parallel.torch_workers import rendezvous
from mxbench.bench.parallel.workers import (
    PORT_BASE,
    PORT_BLOCKS,
    PORT_SPAN,
    expand_nodelist,
    gpu_slice,
    task_counts,
    tf_config,
)


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("vm", ["vm"]),
        ("n[1-2],m5,o[3-4,6,7-9]", ["n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"]),
        ("gpu[08-10]", ["gpu08", "gpu09", "gpu10"]),  # the padding kept, Slurm's order
        ("r[1-2]-n[1-2]", ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]),
        ("a-1.b,c", ["a-1.b", "c"]),
    ],
)
def test_slurm_host_lists_expand_in_slurms_order(text: str, hosts: list[str]) -> None:
    assert expand_nodelist(text) == hosts


@pytest.mark.parametrize("text", ["n[1-x]", "n[1-2", "", "n[a]"])
def test_a_malformed_host_list_is_named(text: str) -> None:
    with pytest.raises(RuntimeError, match="node list"):
        expand_nodelist(text)


def test_tasks_per_node_expand_their_repeats() -> None:
    assert task_counts("2(x3),1") == [2, 2, 2, 1]
    assert task_counts("4") == [4]
    with pytest.raises(RuntimeError, match="tasks per node"):
        task_counts("2(x)")


def _env(rank: int, **more: str) -> dict[str, str]:
    return {
        "SLURM_JOB_ID": "1234",
        "SLURM_STEP_NODELIST": "n[9-10]",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "SLURM_STEP_NUM_TASKS": "4",
        "SLURM_PROCID": str(rank),
        **more,
    }


def test_tf_config_lists_every_task_in_rank_order_on_ports_from_the_job_id() -> None:
    """Block distribution over n9, n10 (n10 after n9, as Slurm ranks them, not by name);
    the job's ports start at its block, one per task of a node."""
    base = PORT_BASE + 1234 % PORT_BLOCKS * PORT_SPAN
    config = tf_config(_env(2, SLURMD_NODENAME="n10", SLURM_LOCALID="0"))
    assert config["cluster"]["worker"] == [
        f"n9:{base}", f"n9:{base + 1}", f"n10:{base}", f"n10:{base + 1}"
    ]  # fmt: skip
    assert config["task"] == {"type": "worker", "index": 2}
    assert base + PORT_SPAN <= 32768  # below Linux's ephemeral ports
    other = tf_config({**_env(0), "SLURM_JOB_ID": "1235"})["cluster"]["worker"][0]
    assert other == f"n9:{base + PORT_SPAN}"  # the next job: the next block


def test_a_task_elsewhere_than_block_distribution_puts_it_is_refused() -> None:
    with pytest.raises(RuntimeError, match="--distribution=block"):
        tf_config(_env(1, SLURMD_NODENAME="n10", SLURM_LOCALID="0"))  # cyclic would do this


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"SLURM_STEP_NUM_TASKS": "3"}, "disagree"),
        ({"SLURM_PROCID": "4"}, "not one of"),
        ({"SLURM_STEP_TASKS_PER_NODE": "40(x2)", "SLURM_STEP_NUM_TASKS": "80"}, "at most"),
    ],
)
def test_slurm_variables_that_disagree_are_named(change: dict[str, str], words: str) -> None:
    with pytest.raises(RuntimeError, match=words):
        tf_config({**_env(0), **change})


def test_outside_a_slurm_step_the_missing_variable_is_named() -> None:
    with pytest.raises(RuntimeError, match="SLURM_STEP_NODELIST is not set"):
        tf_config({"SLURM_PROCID": "0"})


def test_the_job_level_variables_serve_when_the_steps_are_missing() -> None:
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "vm", "SLURM_TASKS_PER_NODE": "2",
           "SLURM_NTASKS": "2", "SLURM_PROCID": "1"}  # fmt: skip
    assert tf_config(env)["cluster"]["worker"][1].startswith("vm:")


def test_each_task_of_a_node_takes_its_own_gpus() -> None:
    assert gpu_slice(visible=4, local=1, devices=2) == slice(2, 4)  # the node's GPUs shared
    assert gpu_slice(visible=2, local=1, devices=2) == slice(0, 2)  # bound per task by Slurm


def test_torch_meets_at_the_first_node_on_the_jobs_first_port() -> None:
    """torchrun's variables: rank 0's host (n9, Slurm's first, not n10 by name) on the first
    port of the job's block (the port TensorFlow's first worker gets), rank and world from
    Slurm's task id and count."""
    env = _env(3, SLURM_LOCALID="1")
    found = rendezvous(env)
    first = tf_config(env)["cluster"]["worker"][0]
    assert (
        f"{found['MASTER_ADDR']}:{found['MASTER_PORT']}"
        == first
        == f"n9:{PORT_BASE + 1234 % PORT_BLOCKS * PORT_SPAN}"
    )
    assert (found["RANK"], found["WORLD_SIZE"], found["LOCAL_RANK"]) == ("3", "4", "1")
    with pytest.raises(RuntimeError, match="SLURM_PROCID is not set"):
        rendezvous({k: v for k, v in env.items() if k != "SLURM_PROCID"})


_AVERAGE = """
import json, os, socket
import torch
import torch.distributed as dist
from mxbench.bench.parallel.torch_workers import average
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
dist.init_process_group("gloo", rank=0, world_size=1)
grads = [torch.tensor([1.0 + 2**-12, 3.0, 7e4]), None, torch.tensor([[0.1, -0.2]])]
out = {d: [g if g is None else g.tolist() for g in average(torch, grads, d)]
       for d in ("native", "bfloat16", "float16")}
out["dtypes"] = sorted({str(g.dtype) for g in average(torch, grads, "bfloat16") if g is not None})
print(json.dumps(out), flush=True)
dist.destroy_process_group()  # else gloo's threads may abort the exit ("terminate called ...")
"""


def test_gradients_are_all_reduced_in_the_dtype_chosen_and_come_back_in_their_own() -> None:
    """A real gloo process group (one process: the all-reduce is the sum of one): native
    leaves the gradients as they are; bfloat16 and float16 round them once, as a 16-bit
    all-reduce does (1 + 2^-12 is 1 in both), and float16's sum overflows past 65504
    (70,000 becomes inf: the step a loss-scale optimizer skips); a missing gradient stays
    missing, and the optimizer gets float32 back."""
    import json
    import subprocess
    import sys

    pytest.importorskip("torch")
    run = subprocess.run([sys.executable, "-c", _AVERAGE], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    native, bf16, f16 = out["native"], out["bfloat16"], out["float16"]
    assert native[0] == pytest.approx([1.0 + 2**-12, 3.0, 7e4]) and native[0][0] != 1.0
    assert native[1] is None and bf16[1] is None and f16[1] is None
    assert bf16[0][0] == 1.0 and f16[0][0] == 1.0  # rounded once, on the wire
    assert bf16[0][2] == 70144.0  # bfloat16 keeps float32's range, at 8 bits of mantissa
    assert f16[0][2] == float("inf")  # float16's range ends at 65504
    assert bf16[2][0] == pytest.approx([0.1, -0.2], rel=2**-8) and out["dtypes"] == [
        "torch.float32"
    ]
