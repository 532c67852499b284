"""The memory answer measures training only (issue 34, Step 19).

Nothing that is not the cell's own training may raise its peak memory or turn it into an
OOM: a batch-size search's trials run neither the profiled window nor the one-step check;
the peak is read right after the timed steps; and the bench prints its measured record
before those extra phases, so that a process killed in one of them (the kernel's OOM kill
under a memory limit) still leaves its timed figures, with the phase it died in named.

The kill is real: a user's model whose layer sends its own process SIGKILL (what the OOM
killer sends) when it is called eagerly in training mode on real tensors, which only the
one-step check does (the timed steps and the profiled window run the traced train
function).
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from mxbench.matrix.file import parse_matrix
from mxbench.records.codec import tail
from mxbench.report.sections import capacity

from conftest import mxbench, records
from mxbench.cells import cell as cells
from report_records import rec, typed

KILLED_IN_EAGER = """
import os
import signal

import keras
import tensorflow as tf
from keras import layers


class KillWhenEager(layers.Layer):
    def call(self, x, training=None):
        if training and tf.executing_eagerly() and isinstance(x, tf.Tensor):
            os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer would
        return x


def build(image_size):
    inputs = keras.Input(shape=(image_size, image_size, 3))
    x = layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    x = KillWhenEager()(x)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(3, activation="softmax", dtype="float32")(x))
"""


def test_a_process_killed_in_its_one_step_check_keeps_its_timed_figures(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    (tmp_path / "killer.py").write_text(KILLED_IN_EAGER)
    (tmp_path / "m.yaml").write_text(
        """
version: 1
benchmark: {model: killer.py:build, image_size: 16, warmup_steps: 1, steps: 3, profile: off,
            repeats: 1, pairing: process}
axes: {policy: [mixed_bfloat16], batch_size: [8]}
hosts: [{name: box, engine: local}]
"""
    )
    out = mxbench("run", "-m", "m.yaml", cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    (rec,) = records(tmp_path / "results")
    assert rec["status"] == "ok", rec.get("error")
    assert rec["metrics"]["step_ms"]["median"] > 0  # the timed figures stand
    assert rec["metrics"]["peak_memory_bytes"] > 0  # read before the check
    assert rec["pending"] == ["check"]
    assert rec["run"]["exit_code"] in (-9, 137)
    conv = rec["convergence"]
    assert conv["check"] == "error"
    assert conv["note"].startswith(
        "the one-step check did not finish: the bench process was killed (out of memory)"
    ), conv["note"]
    assert conv["cosine"] is None
    report = mxbench("report", "--markdown", cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-2000:]
    assert "not checked" in report.stdout


SEARCH = """
version: 1
benchmark: {image_size: 32, batch_search: {start: 8, cap: 64}}
axes: {policy: [float32, mixed_bfloat16], batch_size: [max]}
hosts: [{name: box, engine: local, memory_limit: 2g}]
"""


def test_search_trials_train_only_and_the_report_says_so() -> None:
    found = cells.searches(parse_matrix(SEARCH))
    assert len(found) == 2
    for search in found:
        trial = search.trial(16)
        assert (trial.params.profile, trial.params.check) == ("off", "off")
        assert trial.params.steps <= cells.TRIAL_STEPS and trial.params.warmup_steps <= 1
    trials = []
    for search in found:
        for batch, status in ((8, "ok"), (16, "ok"), (32, "oom")):
            r = rec(
                "box",
                search.template.params.policy,
                batch,
                status=status,
                search={"start": 8, "cap": 64, "max_trials": 16, "precision": 1.0},
            )
            r["params"].update(profile="off", check="off")
            if status == "ok":
                r["metrics"].update(peak_memory_bytes=2**30, peak_memory_kind="cgroup")
            trials.append(typed(r))
    (cap,) = capacity.build(trials)
    said = capacity.counted(cap)
    assert "Each trial trained only (no profiled window, no one-step check" in said, said
    assert "what the memory limit counts" in said, said
    assert capacity.rows(cap)[1][0][3] == "1.00 GiB (cgroup)"
    for r in trials:  # older trials ran the extras: the report says what that may mean
        r.params = msgspec.structs.replace(r.params, profile="on", check="on")
    (cap,) = capacity.build(trials)
    assert "their memory, not the training's, may have decided an OOM" in capacity.counted(cap)


def test_an_error_keeps_its_first_line_the_reason() -> None:
    log = "ResourceExhaustedError: OOM when allocating tensor\n" + "\n".join(
        f"onednn_verbose,v1,primitive,exec,cpu,{i}" for i in range(500)
    )
    kept = tail(log)
    assert kept.splitlines()[0] == "ResourceExhaustedError: OOM when allocating tensor"
    assert kept.splitlines()[-1] == "onednn_verbose,v1,primitive,exec,cpu,499"
    assert "…" in kept and len(kept) <= 4000
    assert tail("short\nlog") == "short\nlog"
