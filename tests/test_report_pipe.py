"""markdown.table writes its pipe tables itself: byte for byte what tabulate wrote."""

from __future__ import annotations

import random

import pytest
from mxbench.report.render import markdown
from tabulate import tabulate

# Cells as the report makes them, and the edges tabulate treats apart: whitespace it strips
# (Unicode's too), True / False (its bool type), empty cells, non-ASCII, markdown to escape.
PIECES = [
    "",
    " ",
    "  x ",
    "\u3000y\xa0",
    "True",
    "False",
    "12.5",
    "-3",
    "1e308",
    "ok",
    "OOM",
    "–",
    "≈ same",
    "1.23× faster",
    "mixed_float16",
    "a|b",
    "_x_",
    "<b>",
    "7.0 · sm_70",
    "nan",
    "inf",
    "0x10",
    "1,000",
    "  42  ",
    "a\tb",
    "x\ny",
    "\x1b[31mred\x1b[0m",
]


def _cell(rng: random.Random) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 3)))


def _tabulated(headers: list[str], rows: list[list[str]], limit: int | None) -> str:
    """What markdown.table wrote before: the same cells and alignment through tabulate."""
    headers = [markdown.escape(h, limit) for h in headers]
    rows = [[markdown.escape(c, limit) for c in row] for row in rows]
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(headers)
    num, gap = markdown._numeric, markdown._NOT_A_NUMBER
    align = [
        "right"
        if any(num(c) for c in col) and all(num(c) or c in gap for c in col if c)
        else "left"
        for col in columns
    ]
    return str(tabulate(rows, headers, tablefmt="pipe", disable_numparse=True, colalign=align))


@pytest.mark.parametrize("seed", range(40))
def test_pipe_table_is_tabulates(seed: int) -> None:
    rng = random.Random(seed)
    width, height = rng.randint(1, 7), rng.randint(0, 12)
    headers = [_cell(rng) for _ in range(width)]
    rows = [[_cell(rng) for _ in range(width)] for _ in range(height)]
    for limit in (markdown.MAX_TEXT, 3, None):
        assert markdown.table(headers, rows, limit) == _tabulated(headers, rows, limit)


def test_numbers_and_gaps_right_aligned() -> None:
    out = markdown.table(["batch", "float32", "note"], [["16", "12.5", "a"], ["256", "–", "bc"]])
    assert out.splitlines() == [
        "|   batch |   float32 | note   |",
        "|--------:|----------:|:-------|",
        "|      16 |      12.5 | a      |",
        "|     256 |         – | bc     |",
    ]


def test_wide_characters_left_to_tabulate(monkeypatch: pytest.MonkeyPatch) -> None:
    """With wcwidth installed tabulate measures a cell by its display width: so does the
    table then (tabulate writes it)."""
    import types

    import tabulate as module

    def wcswidth(s: str) -> int:
        return sum(1 if ch.isascii() else 2 for ch in s)

    monkeypatch.setattr(module, "wcwidth", types.SimpleNamespace(wcswidth=wcswidth))
    monkeypatch.setattr(module, "WIDE_CHARS_MODE", True)
    headers, rows = ["device", "16"], [["日本 GPU", "1.2×"], ["V100", "–"]]
    wide = markdown.table(headers, rows)
    assert wide == _tabulated(headers, rows, markdown.MAX_TEXT)
    assert wide != markdown._pipe(headers, list(zip(*rows, strict=True)), ["left", "right"])
