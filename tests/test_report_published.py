"""The blog post's published tables, shipped as transcribed records, come out as published."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "examples" / "published"

# experiment.md: batch -> (mixed_float16, float32) ms/step; None = "-" (out of memory)
V100 = {32: (28, 30), 64: (52, 56), 128: (97, 106), 256: (188, 206), 512: (377, 415)}
TITAN_XP = {32: (44, 38), 64: (70, 70), 128: (142, 136), 256: (270, 270), 512: (518, 539)}
M2200 = {32: (186, 197), 64: (352, 375), 128: (687, 746), 256: (1000, None), 512: (None, None)}


@pytest.fixture(scope="module")
def report() -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "mxbench", "report", "--results", str(PUBLISHED), "--markdown"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr
    return proc.stdout


def section(report: str, host: str) -> str:
    m = re.search(rf"^## {host} · .*?(?=^## |\Z)", report, re.M | re.S)
    assert m, f"no section for {host}"
    return m.group(0)


def rows(text: str) -> dict[int, list[str]]:
    """batch -> cells of the markdown table in a section (float32 ms and images/s,
    mixed_float16 ms and images/s, speedup)."""
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("|") and cells[0].isdigit():
            out[int(cells[0])] = cells[1:]
    return out


def expected_cell(ms: int | None) -> str:
    return "OOM" if ms is None else f"{ms:.1f}"


@pytest.mark.parametrize(
    ("host", "table", "cc"),
    [("blog-v100", V100, "7.0"), ("blog-titan-xp", TITAN_XP, "6.1"), ("blog-m2200", M2200, "5.2")],
)
def test_numbers_speedups_and_oom(report: str, host: str, table: dict, cc: str) -> None:
    text = section(report, host)
    assert f"CC {cc} (" in text
    got = rows(text)
    assert sorted(got) == sorted(table)
    for batch, (mixed, fp32) in table.items():
        f32_cell, f32_rate, mixed_cell, _, speedup = got[batch]
        assert f32_rate == (f"{batch * 1000 / fp32:.0f}" if fp32 else "")
        assert f32_cell == expected_cell(fp32)
        assert mixed_cell == expected_cell(mixed)
        want = f"{fp32 / mixed:.2f}" if mixed and fp32 else "–"
        assert speedup == want, (host, batch)
    assert "transcribed: rstudio ai-blog 2020-01-13" in text


def test_exact_published_speedups(report: str) -> None:
    assert rows(section(report, "blog-v100"))[256][4] == "1.10"  # 206 / 188
    assert rows(section(report, "blog-titan-xp"))[32][4] == "0.86"  # 38 / 44
    m2200 = rows(section(report, "blog-m2200"))
    assert m2200[256][:4] == ["OOM", "", "1000.0", "256"]  # ms/step, images/s per policy
    assert m2200[512][:4] == ["OOM", "", "OOM", ""]


def test_tensor_core_annotations_and_diagnosis(report: str) -> None:
    v100, titan, m2200 = (section(report, h) for h in ("blog-v100", "blog-titan-xp", "blog-m2200"))
    assert "CC 7.0 (Volta) · fp16 Tensor Cores: yes · bf16 Tensor Cores: no" in v100
    assert "CC 6.1 (Pascal) · fp16 Tensor Cores: no · bf16 Tensor Cores: no" in titan
    assert "CC 5.2 (Maxwell) · fp16 Tensor Cores: no · bf16 Tensor Cores: no" in m2200
    for text in (titan, m2200):
        assert "No Tensor Cores: compute capability" in text
    assert "No Tensor Cores" not in v100
    # the V100's own explanations: input-bound at 72%/78% and far below the fp16 peak
    assert "72% at batch 32" in v100 and "78% at batch 128" in v100
    assert re.search(
        r"mixed_float16 \(float16\) at batch 32–512: [\d.–]+ TFLOP/s, 8–10% of "
        r"the 125 TFLOP/s float16 datasheet roof \(MFU\), far below",
        v100,
    )


def test_summary_has_every_device(report: str) -> None:
    # the answer first: right after the counts, before any table
    assert report.index("## Summary: mixed_float16 against float32") < report.index("## blog-")
    summary = report.split("## Summary", 1)[1].split("\n## ", 1)[0]
    lines = [[c.strip() for c in ln.strip("|").split("|")] for ln in summary.splitlines()]
    by_host = {cells[0].split(" · ")[0]: cells[1:] for cells in lines if len(cells) > 2}
    assert by_host["device"] == ["32", "64", "128", "256", "512"]
    assert by_host["blog-v100"] == ["1.07", "1.08", "1.09", "1.10", "1.10"]
    assert by_host["blog-titan-xp"] == ["0.86", "1.00", "0.96", "1.00", "1.04"]
    assert by_host["blog-m2200"] == ["1.06", "1.07", "1.09", "OOM", "OOM"]
