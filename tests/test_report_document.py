"""One document, small renderers: the answer first in every format, each grid cell's verdict,
several outputs in one call, a terminal rendering, nothing the tool wrote cut, the failures
in HTML, one colour per policy in every plot."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mxbench.cells.cell import cell_key
from mxbench.matrix.params import Params
from mxbench.report.render import html, markdown, terminal
from mxbench.report.render.plot import POLICY_COLOURS, png, speedup_png

from mxbench.report import document, tables, text
from mxbench.report.load import load
from mxbench.report.tables import build
from report_records import rec, write

ROOT = Path(__file__).resolve().parents[1]
V100 = {"kind": "gpu", "name": "Tesla V100-SXM2-16GB", "compute_capability": "7.0"}


def timed(policy: str, batch: int, median: float, losses: list[float | None] | None = None,
          host: str = "h") -> list[dict[str, Any]]:  # fmt: skip
    """The slot measured in 3 processes (repeats), whose levels differ by under 1%: enough
    processes for an interval and a verdict."""
    spread = (0.99, 1.0, 1.01, 0.995, 1.005, 0.998, 1.002)
    out = []
    for repeat, level in enumerate((0.996, 1.0, 1.004)):
        m = median * level
        metrics: dict[str, Any] = {
            "step_ms": {"median": m, "p25": m * 0.995, "p75": m * 1.005, "n": 7,
                        "samples": [m * f for f in spread]},
        }  # fmt: skip
        if losses is not None:
            metrics["losses"] = losses
        r = rec(host, policy, batch, device=V100, metrics=metrics)
        r["params"]["repeat"] = repeat
        r["cell"] = cell_key(host, None, None, Params(**r["params"]))
        out.append(r)
    return out


LOSS = [2.3, 2.2, 2.1]


def mixed_bag(tmp_path: Path) -> document.Document:
    """One table with every kind of grid cell."""
    recs = [
        *timed("float32", 8, 100.0), *timed("mixed_float16", 8, 50.0),  # faster
        *timed("float32", 16, 100.0), *timed("mixed_float16", 16, 100.0),  # same
        *timed("float32", 32, 100.0), *timed("mixed_float16", 32, 200.0),  # slower
        *timed("float32", 64, 100.0, LOSS), *timed("mixed_float16", 64, 50.0, [2.3, None, None]),
        *timed("float32", 128, 100.0),
        rec("h", "mixed_float16", 128, status="oom", device=V100, error="OOM when allocating"),
        *timed("float32", 256, 100.0),
        rec("h", "mixed_float16", 256, status="error", device=V100,
            error="Traceback (most recent call last):\n  ...\nValueError: " + "why " * 100),
    ]  # fmt: skip
    loaded = load([write(tmp_path / "h.jsonl", recs)])
    return document.build(loaded, build(loaded.winners))


def test_each_grid_cell_carries_its_verdict(tmp_path: Path) -> None:
    doc = mixed_bag(tmp_path)
    (g,) = doc.grids
    assert g.policy == "mixed_float16" and g.batches == [8, 16, 32, 64, 128, 256]
    (row,) = g.rows
    assert row.anchor == "table-1"
    assert [c.verdict for c in row.cells] == ["faster", "same", "slower", "diverged", "oom",
                                              "failed"]  # fmt: skip
    assert [c.value for c in row.cells] == ["2.00", "1.00", "0.50", "2.00", "OOM", "error"]
    assert "faster" in row.cells[0].detail and "[" in row.cells[0].detail  # the interval
    assert row.cells[4].detail == "mixed_float16 OOM"


def test_one_number_per_side_gives_a_direction_not_a_verdict(tmp_path: Path) -> None:
    loaded = load([ROOT / "examples" / "published"])
    doc = document.build(loaded, build(loaded.winners))
    titan = next(r for r in doc.grids[0].rows if r.title.startswith("blog-titan-xp"))
    assert [c.verdict for c in titan.cells] == ["point-slower", "point-same", "point-slower",
                                                "point-same", "point-faster"]  # fmt: skip


def test_the_answer_comes_first_in_every_format(tmp_path: Path) -> None:
    doc = mixed_bag(tmp_path)
    md = markdown.render(doc)
    assert md.index("## Summary: mixed_float16 against float32") < md.index("## h · ")
    page = html.render(doc, lambda t: [])
    assert page.index('<section id="summary">') < page.index('<section class="device"')
    assert 'class="v-faster"' in page and 'class="v-diverged"' in page
    assert '<a href="#table-1">' in page and 'id="table-1"' in page
    out = terminal.render(doc)
    assert out.index("mixed_float16 against float32: speedup") < out.index("Diagnosis:")
    exported = json.loads(document.render(doc, "json"))
    cells = exported["summary"][0]["devices"][0]["cells"]
    assert [c["verdict"] for c in cells][:3] == ["faster", "same", "slower"]


def test_the_failures_are_listed_in_html_and_what_the_tool_wrote_is_whole(
    tmp_path: Path,
) -> None:
    doc = mixed_bag(tmp_path)
    (s,) = doc.speed
    assert s.failures[0] == "batch 128 mixed_float16 (OOM): OOM when allocating"
    assert s.failures[1].startswith("batch 256 mixed_float16 (error): ValueError: why why")
    assert len(s.failures[1]) <= tables.MAX_RECORD_TEXT + 40  # a record's text is bounded
    page = html.render(doc, lambda t: [])
    assert '<h3>Failures</h3><ul class="failures">' in page and "OOM when allocating" in page
    loaded = load([ROOT / "examples" / "measured" / "h100"])
    h100 = document.build(loaded, build(loaded.winners))
    long = max((n for s in h100.speed for n in s.diagnosis), key=len)
    assert len(long) > 300  # longer than markdown's old cut, and shown whole
    assert markdown.escape(long, limit=None) in markdown.render(h100)


def test_several_outputs_in_one_call_each_in_its_suffix_format(tmp_path: Path) -> None:
    src = write(tmp_path / "res" / "h.jsonl", [*timed("float32", 8, 100.0),
                                               *timed("mixed_float16", 8, 50.0)])  # fmt: skip
    outs = [tmp_path / n for n in ("r.md", "r.html", "r.json", "r.csv", "r.txt")]
    args = [a for o in outs for a in ("--output", str(o))]
    proc = subprocess.run([sys.executable, "-m", "mxbench", "report", "-r", str(src.parent),
                           *args], capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    md, page, js, csv, txt = (o.read_text() for o in outs)
    assert md.startswith("# mxbench report") and page.startswith("<!DOCTYPE html>")
    assert json.loads(js)["summary"][0]["policy"] == "mixed_float16"
    assert csv.startswith("host,") and "mixed_float16 against float32: speedup" in txt
    assert "\x1b[" not in txt  # plain text in a file
    bad = subprocess.run([sys.executable, "-m", "mxbench", "report", "-r", str(src.parent),
                          "-o", str(tmp_path / "r.pdf")], capture_output=True, text=True,
                         check=False)  # fmt: skip
    assert bad.returncode == 2 and "cannot tell the format from its suffix" in bad.stderr
    mixed = subprocess.run([sys.executable, "-m", "mxbench", "report", "-r", str(src.parent),
                            "--html", *args[:4]], capture_output=True, text=True,
                           check=False)  # fmt: skip
    assert mixed.returncode == 2 and "suffix names its format" in mixed.stderr
    for o in outs:
        o.unlink()
    nowhere = subprocess.run([sys.executable, "-m", "mxbench", "report", "-r", str(src.parent),
                              *args[:2], "-o", str(tmp_path / "no" / "r.html")],
                             capture_output=True, text=True, check=False)  # fmt: skip
    assert nowhere.returncode == 2 and f"no folder {tmp_path / 'no'}" in nowhere.stderr
    assert not outs[0].exists()  # checked before anything is written


def test_a_terminal_gets_colours_a_pipe_gets_markdown(tmp_path: Path) -> None:
    from rich.console import Console

    doc = mixed_bag(tmp_path)
    buf = io.StringIO()
    terminal.show(doc, Console(file=buf, force_terminal=True, width=140, color_system="truecolor"))
    assert "\x1b[" in buf.getvalue()  # coloured cells
    src = write(tmp_path / "res" / "h.jsonl", timed("float32", 8, 100.0))
    piped = subprocess.run([sys.executable, "-m", "mxbench", "report", "-r", str(src.parent)],
                           capture_output=True, text=True, check=False)  # fmt: skip
    assert piped.returncode == 0 and piped.stdout.startswith("# mxbench report")


def test_a_record_cannot_style_the_terminal(tmp_path: Path) -> None:
    r = timed("float32", 8, 100.0, host="[bold red]x[/]")
    loaded = load([write(tmp_path / "h.jsonl", r)])
    out = terminal.render(document.build(loaded, build(loaded.winners)))
    assert "[bold red]x[/]" in out


def _setups(name: str, values: tuple[Any, ...]) -> list[dict[str, Any]]:
    """float32 and mixed_float16 at batch 8 on host h, once per value of parameter ``name``."""
    recs = []
    for value in values:
        for r in [*timed("float32", 8, 100.0), *timed("mixed_float16", 8, 50.0)]:
            r["params"][name] = value
            r["cell"] = cell_key("h", None, None, Params(**r["params"]))
            recs.append(r)
    return recs


def _doc(path: Path, recs: list[dict[str, Any]]) -> document.Document:
    loaded = load([write(path, recs)])
    return document.build(loaded, build(loaded.winners))


def test_tables_that_differ_only_in_a_setup_parameter_are_told_apart(tmp_path: Path) -> None:
    doc = _doc(tmp_path / "h.jsonl", _setups("image_size", (64, 128)))
    assert sorted(row.title for row in doc.grids[0].rows) == [
        "h · Tesla V100-SXM2-16GB · image_size 128",
        "h · Tesla V100-SXM2-16GB · image_size 64",
    ]
    assert "## h · Tesla V100-SXM2-16GB · image_size 128" in markdown.render(doc)


def test_a_fixed_input_model_asked_for_two_sizes_is_told_apart(tmp_path: Path) -> None:
    """A model whose input is fixed at 40x48 takes that input whatever image_size its cells
    ask for: two tables that differ only in what was asked still read differently."""
    recs = _setups("image_size", (64, 128))
    for r in recs:
        r["model"] = {"name": "blog-cnn", "image_input": [40, 48]}
    doc = _doc(tmp_path / "h.jsonl", recs)
    assert sorted(row.title for row in doc.grids[0].rows) == [
        "h · Tesla V100-SXM2-16GB · image_size 128 asked, 40 taken",
        "h · Tesla V100-SXM2-16GB · image_size 64 asked, 40 taken",
    ]
    assert "image_size 40 · image_width 48" in markdown.render(doc)  # the setup line


def test_with_several_models_every_table_names_its_model(tmp_path: Path) -> None:
    """A zoo run: the default model's table names it too, not a bare host and device
    among rows that each name their model."""
    doc = _doc(tmp_path / "h.jsonl", _setups("model", ("blog-cnn", "resnet50")))
    assert sorted(row.title for row in doc.grids[0].rows) == [
        "h · Tesla V100-SXM2-16GB · blog-cnn",
        "h · Tesla V100-SXM2-16GB · resnet50",
    ]
    alone = _doc(tmp_path / "one.jsonl", _setups("model", ("blog-cnn",)))
    assert [row.title for row in alone.grids[0].rows] == ["h · Tesla V100-SXM2-16GB"]


def test_a_record_cannot_send_control_sequences_to_the_terminal(tmp_path: Path) -> None:
    host = "a\x1b[31mred\x1b]0;title\x07\x9b2Jb"
    recs = [*timed("float32", 8, 100.0, host=host), *timed("mixed_float16", 8, 50.0, host=host)]
    recs[-1]["error"] = "x\x1b[2Jy"
    from rich.console import Console

    loaded = load([write(tmp_path / "h.jsonl", recs)])
    buf = io.StringIO()
    terminal.show(document.build(loaded, build(loaded.winners)),
                  Console(file=buf, force_terminal=True, width=140))  # fmt: skip
    out = buf.getvalue()
    assert "\x1b]" not in out and "\x1b[31m" not in out and "\x9b" not in out
    assert "red" in out and "title" in out


@pytest.mark.parametrize("draw", [png, speedup_png])
def test_a_policy_has_one_colour_in_every_plot(tmp_path: Path, draw: Any) -> None:
    import matplotlib.image

    doc = mixed_bag(tmp_path)
    data = draw(doc.tables[0])
    assert data is not None
    pixels = matplotlib.image.imread(io.BytesIO(data))[..., :3]
    want = [int(POLICY_COLOURS["mixed_float16"][i : i + 2], 16) / 255 for i in (1, 3, 5)]
    near = (abs(pixels - want).max(axis=-1) < 0.02).sum()
    assert near > 50, "mixed_float16's line is not in its colour"


def test_no_float32_says_why_there_is_no_summary_in_every_format(tmp_path: Path) -> None:
    src = write(tmp_path / "res" / "h.jsonl", [*timed("mixed_float16", 8, 50.0),
                                               *timed("mixed_bfloat16", 8, 60.0)])  # fmt: skip
    loaded = load([src])
    doc = document.build(loaded, build(loaded.winners))
    assert doc.grids == [] and doc.notices[0] == text.NO_SUMMARY
    assert markdown.escape(text.NO_SUMMARY, limit=None) in markdown.render(doc)
    assert json.loads(document.render(doc, "json"))["notices"][0] == text.NO_SUMMARY
    with_base = write(tmp_path / "ok" / "h.jsonl", [*timed("float32", 8, 100.0),
                                                    *timed("mixed_float16", 8, 50.0)])  # fmt: skip
    ok = load([with_base])
    assert text.NO_SUMMARY not in document.build(ok, build(ok.winners)).notices


def test_tables_come_in_the_order_of_their_numbers_not_of_their_text(tmp_path: Path) -> None:
    recs = []
    for size in (256, 64, 1024, 128):
        for r in [*timed("float32", 8, 100.0), *timed("mixed_float16", 8, 50.0)]:
            r["params"]["image_size"] = size
            r["cell"] = cell_key("h", None, None, Params(**r["params"]))
            recs.append(r)
    loaded = load([write(tmp_path / "h.jsonl", recs)])
    assert [t.setup["image_size"] for t in build(loaded.winners)] == [64, 128, 256, 1024]


def test_a_slot_that_failed_without_a_word_is_still_a_failure(tmp_path: Path) -> None:
    src = write(tmp_path / "h.jsonl", [*timed("float32", 8, 100.0), *timed("float32", 16, 100.0),
                                       rec("h", "float32", 32, status="oom", device=V100),
                                       rec("h", "mixed_float16", 8, status="timeout",
                                           device=V100, error="  \n")])  # fmt: skip
    loaded = load([src])
    (s,) = document.build(loaded, build(loaded.winners)).speed
    assert s.failures == ["batch 8 mixed_float16 (timeout)", "batch 32 float32 (OOM)"]


def test_an_output_that_is_a_results_file_read_is_refused_and_the_records_stay(
    tmp_path: Path,
) -> None:
    both = [*timed("float32", 8, 100.0), *timed("mixed_float16", 8, 50.0)]
    src = write(tmp_path / "res" / "deep" / "h.jsonl", both)
    measured = src.read_bytes()
    named = write(tmp_path / "other" / "run.json", timed("float32", 8, 100.0))  # any name
    link = tmp_path / "link.md"
    link.symlink_to(src)
    other = tmp_path / "r.md"
    for args in (["-r", str(tmp_path / "res"), "--json", "-o", str(src)],
                 ["-r", str(named), "-o", str(other), "-o", str(named.parent / ".." / "other" /
                                                               "run.json")],
                 ["-r", str(tmp_path / "res"), "-o", str(link)]):  # fmt: skip
        proc = subprocess.run([sys.executable, "-m", "mxbench", "report", *args],
                              capture_output=True, text=True, check=False)  # fmt: skip
        assert proc.returncode == 2, (args, proc.stderr)
        assert "is a results file this report reads" in proc.stderr
        assert "Traceback" not in proc.stderr
        assert src.read_bytes() == measured and not other.exists()
    assert json.loads(named.read_text().splitlines()[0])["host"] == "h"


def test_the_same_output_named_twice_is_refused(tmp_path: Path) -> None:
    src = write(tmp_path / "res" / "h.jsonl", timed("float32", 8, 100.0))
    out = tmp_path / "r.md"
    proc = subprocess.run([sys.executable, "-m", "mxbench", "report", "-r", str(src),
                           "-o", str(out), "-o", str(tmp_path / "." / "r.md")],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 2 and "named twice" in proc.stderr and not out.exists()


def _loaded_doc(folder: Path) -> document.Document:
    loaded = load([folder])
    return document.build(loaded, build(loaded.winners))


def test_the_text_file_keeps_every_cell_of_a_wide_table_whole() -> None:
    """-o x.txt: a table wider than 120 columns (four policies, loss parity, as in
    examples/convergence) is written at its own width, no cell or header cut to '…'."""
    doc = _loaded_doc(ROOT / "examples" / "convergence")
    out = terminal.render(doc)
    assert "…" not in out
    lines = out.splitlines()
    for s in doc.sections:
        for row in s.rows:
            assert any(all(c in line for c in row) for line in lines), row
        for h in s.headers:
            assert h in out, h


def test_a_narrow_terminal_folds_and_never_cuts_the_answer() -> None:
    """A 40-column terminal: the grids' speedups, the tables' numbers and headers fold
    onto more lines; none is cut to '…'."""
    from rich.console import Console

    doc = _loaded_doc(ROOT / "examples" / "published")
    buf = io.StringIO()
    terminal.show(doc, Console(file=buf, force_terminal=True, width=40, color_system=None))
    out = buf.getvalue()
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 40


def test_a_repeat_that_failed_beside_ok_ones_is_a_failure_of_the_report(tmp_path: Path) -> None:
    """Two repeats of float32 at batch 32 ran, the third ran out of memory: the slot shows
    the two (ok), and the failures name the third, in every format."""
    records = [*timed("mixed_float16", 32, 60.0)]
    for r in timed("float32", 32, 100.0):
        if r["params"]["repeat"] == 2:
            r.update(status="oom", metrics={}, error="Traceback\nRESOURCE_EXHAUSTED: OOM")
        records.append(r)
    loaded = load([write(tmp_path / "h.jsonl", records)])
    doc = document.build(loaded, build(loaded.winners))
    (s,) = doc.speed
    assert s.failures == ["batch 32 float32 repeat 2 (OOM): RESOURCE_EXHAUSTED: OOM"]
    assert "repeat 2 (OOM)" in markdown.render(doc) and "repeat 2 (OOM)" in terminal.render(doc)


def test_a_plain_training_table_names_no_parameter_left_at_its_default(tmp_path: Path) -> None:
    """Axes added for other questions (serving's mode, call, quantization and weights; the
    scaling map's devices, nodes and scaling; loss scaling) are named in a table's setup line
    only where a matrix chose another value: a plain training table reads as it always did,
    whatever parameter is added next (a new one that shows at its default fails here)."""
    path = tmp_path / "r.jsonl"
    write(path, [rec(policy=p, params={"image_size": 32}) for p in ("float32", "mixed_bfloat16")])
    loaded = load([path])
    (table,) = build(loaded.winners)
    from mxbench.report import annotate

    setup = next(line for line in annotate.lines(table) if line.startswith("setup: "))
    named = [part.split(" ")[0] for part in setup.removeprefix("setup: ").split(" · ")]
    assert named == ["model", "image_size", "data", "jit_compile", "backend",
                     "steps_per_execution", "flip"], setup  # fmt: skip
