"""Loss scaling's cost as a figure (issue 34, Step 19): where a matrix varies ``loss_scale``,
the report gives the step-time change between values with an interval, as it does for the
input pipeline. Checked against records with a known truth: step times drawn around a
known ratio, several processes per value."""

from __future__ import annotations

import random
import re

import pytest
from mxbench.report.sections import training

from report_records import rec, typed_all


def processes(scale: str, ms: float, n: int, rng: random.Random) -> list[dict]:
    out = []
    for k in range(n):
        level = ms * rng.lognormvariate(0, 0.02)  # the process's own level
        samples = [round(level * rng.lognormvariate(0, 0.03), 4) for _ in range(30)]
        r = rec(
            "h",
            "mixed_float16",
            32,
            median=sorted(samples)[15],
            metrics={"step_ms": {"median": sorted(samples)[15], "n": 30, "samples": samples}},
        )
        r["params"].update(loss_scale=scale, repeat=k)
        out.append(r)
    return out


@pytest.mark.parametrize("seed", range(3))
def test_the_cost_of_a_loss_scale_is_a_share_with_its_interval(seed: int) -> None:
    rng = random.Random(seed)
    truth = 1 - 100.0 / 110.0  # dynamic scaling's step is 10% longer: 9.1% of it
    recs = processes("none", 100.0, 4, rng) + processes("dynamic", 110.0, 4, rng)
    (said,) = training.loss_scale_costs(typed_all(recs))
    found = re.search(
        r"loss_scale dynamic costs (\d+)% \[(\d+)%–(\d+)%\] of the step against "
        r"none",
        said,
    )
    assert found, said
    low, high = int(found.group(2)) / 100, int(found.group(3)) / 100
    assert low - 0.01 <= truth <= high + 0.01, said
    assert "ms/step with dynamic vs" in said and "with none)" in said


def test_no_cost_where_the_values_time_the_same_and_nothing_without_an_ab() -> None:
    rng = random.Random(7)
    recs = processes("none", 100.0, 4, rng) + processes("1024", 100.0, 4, rng)
    (said,) = training.loss_scale_costs(typed_all(recs))
    assert said.startswith("loss_scale 1024: no clear cost against none"), said
    assert training.loss_scale_costs(typed_all(processes("none", 100.0, 3, rng))) == []


def test_without_none_the_base_is_auto() -> None:
    rng = random.Random(3)
    recs = processes("auto", 100.0, 3, rng) + processes("dynamic", 130.0, 3, rng)
    (said,) = training.shares(typed_all(recs))
    assert "loss_scale dynamic costs" in said and "against auto" in said
