"""The batch-size search on a real engine: a local host under a memory limit (a cgroup).

One search per policy (float32 and a mixed policy) is cut short by ``max_trials: 2`` and
continued with ``--resume``: no trial may run twice. The true limit is then established
independently of the search: plain cells at two batch sizes give the memory each image
costs (the cgroup's peak), the line through them says where the limit is, and the search's
answer must be within two bisection steps (its final gap) of it: near a cgroup's limit the
same cell fits in one process and not in the next (measured here, mixed_bfloat16 at 128 px
under 900m: "128 fits, 160 does not" in one run, "96 fits, 112 does not" in the next), so
one step is inside the band where either outcome is the truth.

The mixed policy is mixed_bfloat16 where TensorFlow computes bfloat16 natively, else
mixed_float16 (``cpu_kinds.mixed_policy``): what is tested is the search, not the bfloat16
arithmetic, and on the AVX2-only kind emulated bfloat16 made this file's trials 5x float32's
time (mixed_float16: 2.3x), 212 s of CI for the file.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import cpu_kinds
from conftest import mxbench, records, require_service
from mxbench.engines.cgroup import CgroupUnavailable, MemoryCgroup
from mxbench.report.load import load
from mxbench.report.sections import capacity

pytestmark = pytest.mark.slow

LIMIT_MB = 900
# 128 px: an image costs about 4.6 MB here. At 64 px it cost under 1 MB, and near the limit
# one process's peak differs from the next one's by tens of MB (the kernel reclaims the
# libraries' pages): more than a bisection step of images, so the independent cells below
# failed in CI (mixed_bfloat16: 224 fitted in the search, 192 ran out in a second process).
IMAGE = 128
# profile: off. Nothing here reads the profiled window, and at these batch sizes its four
# extra steps (seconds each) doubled every trial that fitted.
POLICIES = ("float32", cpu_kinds.mixed_policy())


def matrix(batch: str, search: str = "") -> str:
    return f"""
version: 1
benchmark:
  image_size: {IMAGE}
  warmup_steps: 0
  steps: 1
  timeout_s: 300
  repeats: 1
  profile: off
  batch_search: {{start: 64, cap: 1024, precision: 0.25{search}}}
axes: {{policy: [{", ".join(POLICIES)}], batch_size: {batch}}}
hosts:
  - {{name: box, engine: local, memory_limit: {LIMIT_MB}m}}
"""


def _cgroups() -> bool:
    try:
        MemoryCgroup(2**30, "probe").remove()
        return True
    except CgroupUnavailable:
        return False


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_service(_cgroups(), "a writable cgroup memory controller (memory_limit; root)")
    home = tmp_path_factory.mktemp("search")
    (home / "short.yaml").write_text(matrix("max", ", max_trials: 2"))
    (home / "full.yaml").write_text(matrix("max"))
    out = mxbench("run", "-m", "short.yaml", cwd=home)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stderr.count("trials used up before the bisection ended") == 2, out.stderr
    assert len(records(home / "results")) == 4
    out = mxbench("run", "-m", "full.yaml", "--resume", cwd=home)
    assert out.returncode == 0, out.stderr[-3000:]
    print(out.stderr)
    return home


def test_resume_continues_the_search_without_repeating_a_trial(searched: Path) -> None:
    recs = records(searched / "results")
    tried = Counter((r["params"]["policy"], r["params"]["batch_size"]) for r in recs)
    assert max(tried.values()) == 1, tried  # every trial once, across the two runs
    for policy in POLICIES:
        first = [r["params"]["batch_size"] for r in recs if r["params"]["policy"] == policy]
        assert first[:2] == [64, 128]  # the short run's trials, then the resumed ones
        assert len(first) > 2
    assert {r["status"] for r in recs} == {"ok", "oom"}
    assert all(r["search"]["start"] == 64 for r in recs)
    oom = [r for r in recs if r["status"] == "oom"]
    assert all(f"memory_limit of {LIMIT_MB}m" in r["error"] for r in oom)


def test_answer_is_within_two_bisection_steps_of_the_limit_found_independently(
    searched: Path,
) -> None:
    (cap,) = capacity.build(load([searched / "results"]).winners)
    fits = {p: cap.fits[p].found for p in POLICIES}
    for policy, found in fits.items():
        assert found is not None and found.state == "found", (policy, found)
        assert found.batch is not None and found.oom_at is not None
        assert found.oom_at - found.batch <= max(1, int(found.batch * 0.25))
    # Independently of the search: fresh plain cells (another results directory) two
    # bisection steps below the answer and two above the smallest OOM must train and run out
    # of memory, so the true limit lies within two steps of the answer. (Near the boundary a
    # cell goes either way from one process to the next: seen in CI at 64 px, mixed_bfloat16
    # at 224 trained in the search and 192 ran out of memory in a second process.)
    for policy, found in fits.items():
        assert found is not None and found.batch is not None and found.oom_at is not None
        step = found.oom_at - found.batch
        below, above = max(1, found.batch - 2 * step), found.oom_at + 2 * step
        (searched / f"plain-{policy}.yaml").write_text(
            matrix(f"[{below}, {above}]").replace(
                f"policy: [{', '.join(POLICIES)}]", f"policy: [{policy}]"
            )
        )
        out = mxbench("run", "-m", f"plain-{policy}.yaml", "-r", f"plain-{policy}", cwd=searched)
        assert out.returncode == 0, out.stderr[-3000:]
        status = {
            r["params"]["batch_size"]: r["status"] for r in records(searched / f"plain-{policy}")
        }
        print(f"\n{policy}: search says {found.sentence()}; independently: {status}")
        assert status == {below: "ok", above: "oom"}
        fit = cap.fits[policy]
        assert fit.peak_kind == "cgroup" and fit.peak_bytes is not None
        assert fit.peak_bytes <= LIMIT_MB * 2**20
    text = json.dumps(capacity.rows(cap))
    assert all(policy in text for policy in POLICIES)
