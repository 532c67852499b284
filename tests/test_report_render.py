"""Output formats: tidy CSV, GitHub markdown identical to tabulate's, self-contained HTML."""

from __future__ import annotations

import csv
import io
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from mxbench.report.render import markdown
from mxbench.report.render.plot import png, speedup_png

from conftest import require_service
from mxbench.report import frame, text
from mxbench.report.load import load
from mxbench.report.tables import build
from report_records import rec, write

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "examples" / "published"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def published() -> tuple:
    loaded = load([PUBLISHED])
    return loaded, build(loaded.winners)


def test_markdown_tables_are_github_pipe_tables(published: tuple) -> None:
    _, tables = published
    for t in tables:
        headers, rows = text.table_rows(t)
        lines = markdown.table(headers, rows).splitlines()
        assert len(lines) == len(rows) + 2
        assert all(line.count("|") == len(headers) + 1 for line in lines)  # no stray column
        parsed = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
        assert parsed[0] == headers and parsed[2:] == rows  # same cells as the text
        assert set(lines[1]) <= set("|-:")
    # numbers right-aligned: the batch column's rule ends with a colon
    assert markdown.table(["batch"], [["32"]]).splitlines()[1] == "|--------:|"


def test_markdown_tables_hold_any_cell_in_its_column() -> None:
    """Over random cells that mix numbers, markup, padding, control characters, wide and
    non-breaking spaces, and empty tables: every table has its header, rule and one line per
    row, each with as many columns as the header (nothing in a cell adds or removes one),
    and a column of numbers only is right-aligned."""
    rng = random.Random(7)
    parts = ["1", "2.50", " ", "a", "|", "*", "<b>", "–", "…", "OOM", "-", "\t", "\n",
             "\x1b[31m", "\u3000", "\u00a0", "e3", "nan", "", "x" * 40]  # fmt: skip

    def cell() -> str:
        return "".join(rng.choice(parts) for _ in range(rng.randint(0, 3)))

    def columns(line: str) -> int:
        return len(re.split(r"(?<!\\)\|", line)) - 2

    for _ in range(500):
        n, k = rng.randint(1, 4), rng.randint(0, 4)
        headers = [cell() for _ in range(n)]
        rows = [[cell() for _ in range(n)] for _ in range(k)]
        lines = markdown.table(headers, rows).splitlines()
        assert len(lines) == 2 + k, (headers, rows)
        assert all(columns(line) == n for line in lines), (headers, rows)
    numbers = markdown.table(["batch", "host"], [["8", "a"], ["32", "b"]]).splitlines()[1]
    assert numbers.startswith("|-") and numbers.split("|")[1].endswith(":")
    assert numbers.split("|")[2].startswith(":")


def test_csv_is_tidy_one_row_per_cell(published: tuple) -> None:
    loaded, tables = published
    rows = list(csv.DictReader(io.StringIO(frame.to_csv(loaded, tables))))
    assert len(rows) == 30 and tuple(rows[0]) == frame.COLUMNS
    v100_512 = {
        r["policy"]: r for r in rows if r["host"] == "blog-v100" and r["batch_size"] == "512"
    }
    assert float(v100_512["float32"]["step_ms_median"]) == 415
    assert v100_512["mixed_float16"]["speedup_vs_float32"] == str(round(415 / 377, 4))
    assert v100_512["mixed_float16"]["compute_capability"] == "7.0"
    oom = [r for r in rows if r["host"] == "blog-m2200" and r["status"] == "oom"]
    assert sorted((r["policy"], r["batch_size"]) for r in oom) == [
        ("float32", "256"), ("float32", "512"), ("mixed_float16", "512")
    ]  # fmt: skip
    assert all(r["speedup_vs_float32"] == "" for r in oom)


def test_load_results_is_one_tidy_row_per_cell(tmp_path: Path) -> None:
    import mxbench

    df = mxbench.load_results(PUBLISHED)
    assert len(df) == 30 and tuple(df.columns) == frame.COLUMNS
    v100 = df[(df.host == "blog-v100") & (df.batch_size == 256)].set_index("policy")
    assert v100.loc["mixed_float16", "speedup_vs_float32"] == round(206 / 188, 4)
    assert v100.loc["float32", "compute_capability"] == "7.0"
    assert set(df.backend) == {"tensorflow"} and df.step_ms_median.dtype.kind == "f"
    # every attempt, not only the winners
    first = rec(status="oom", time="2026-01-01T00:00:00+00:00")
    twice = write(tmp_path / "h.jsonl", [first, rec(median=50.0, time="2026-01-02T00:00:00Z")])
    assert len(mxbench.load_results(twice)) == 1
    every = mxbench.load_results(twice, latest=False)
    assert list(every.status) == ["oom", "ok"] and set(every.attempts) == {2}


def test_plot_is_a_png_with_one_line_per_policy(published: tuple) -> None:
    _, tables = published
    data = png(tables[0])
    assert data is not None and data[:8] == b"\x89PNG\r\n\x1a\n"


def test_speedup_plot_draws_the_band_the_1_line_and_oom(published: tuple) -> None:
    import matplotlib.pyplot as plt

    _, tables = published
    m2200 = next(t for t in tables if "M2200" in t.title)
    drawn: list = []
    real_close = plt.close
    plt.close = lambda fig=None: drawn.append(fig)  # keep the figure to look at it
    try:
        data = speedup_png(m2200)
    finally:
        plt.close = real_close
    assert data is not None and data[:8] == b"\x89PNG\r\n\x1a\n"
    (fig,) = drawn
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert "float32 (1.0)" in labels and "mixed_float16" in labels
    notes = [a.get_text() for a in ax.texts]
    assert "OOM\nfloat32" in notes and "OOM\nfloat32, mixed_float16" in notes  # 256, 512
    real_close(fig)
    no_compare = [t for t in tables if not t.reduced]
    assert all(speedup_png(t) is None for t in no_compare)


def _chromium(*args: str, user_dir: Path) -> subprocess.CompletedProcess[str]:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run",
             "--disable-dev-shm-usage", f"--user-data-dir={user_dir}"]  # fmt: skip
    return subprocess.run(
        [CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.slow
def test_html_renders_tables_and_plots_in_headless_chromium(tmp_path: Path) -> None:
    require_service(Path(CHROMIUM).exists(), "chromium (Debian package)")
    page = tmp_path / "report.html"
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-m", "mxbench", "report", "--results",
         str(PUBLISHED), "--html", "--output", str(page)],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = page.read_text()
    assert "http://" not in text and "https://" not in text  # self-contained
    # Probe the page as a browser sees it: the same HTML plus a script that writes what
    # the browser decoded (images' natural sizes, table rows) into the DOM we dump.
    probe = tmp_path / "probe.html"
    probe.write_text(
        text.replace(
            "</body>",
            """<script>
      const imgs = [...document.images].map(i => i.complete + ':' + i.naturalWidth + 'x'
        + i.naturalHeight);
      const rows = [...document.querySelectorAll('table')].map(t => t.rows.length);
      document.body.setAttribute('data-imgs', imgs.join(' '));
      document.body.setAttribute('data-rows', rows.join(' '));
    </script></body>""",
        )
    )
    with tempfile.TemporaryDirectory() as user_dir:
        dom = _chromium("--dump-dom", probe.as_uri(), user_dir=Path(user_dir))
    assert dom.returncode == 0, dom.stderr[-2000:]
    imgs = dom.stdout.split('data-imgs="', 1)[1].split('"', 1)[0].split()
    assert imgs == ["true:600x360"] * 6  # two plots per table, decoded at 6x3.6 in, 100 dpi
    rows = dom.stdout.split('data-rows="', 1)[1].split('"', 1)[0].split()
    assert rows == ["4", "6", "6", "6"]  # the summary first (header + 3), then 5 batch sizes x3
    # the answer comes first: the summary grid, its cells coloured by verdict, links to tables
    assert text.index('id="summary"') < text.index('class="device"')
    assert text.count('href="#table-') == 6  # from the grid and the contents line
    assert "1.10" in dom.stdout and "OOM" in dom.stdout

    shot = tmp_path / "shot.png"
    with tempfile.TemporaryDirectory() as user_dir:
        snap = _chromium(f"--screenshot={shot}", "--window-size=1200,2400", page.as_uri(),
                         user_dir=Path(user_dir))  # fmt: skip
    assert snap.returncode == 0 and shot.exists(), snap.stderr[-2000:]
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)[..., :3]
    # the plot lines are matplotlib's blue and orange; the rest of the page is grey-scale
    colour = (abs(pixels[..., 0] - pixels[..., 2]) > 0.3).sum()
    assert colour > 500, "no coloured plot pixels in the screenshot"


def test_json_export_is_the_tables_as_data(tmp_path: Path) -> None:
    import json

    proc = subprocess.run(
        [sys.executable, "-m", "mxbench", "report", "--results", str(PUBLISHED), "--json"],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "mxbench.report/1" and doc["cells"] == 30
    by_title = {t["host"]: t for t in doc["tables"]}
    v100 = by_title["blog-v100"]
    assert v100["capability"]["compute_capability"] == "7.0"
    assert v100["capability"]["fp16_tensor_cores"] is True
    row = next(r for r in v100["rows"] if r["batch_size"] == 256 and r["policy"] != "float32")
    assert row["speedup"]["value"] == round(206 / 188, 4)
    assert row["step_ms"]["median"] == 188.0 and row["images_per_s"] == round(256000 / 188, 2)
    m2200 = by_title["blog-m2200"]
    oom = next(r for r in m2200["rows"] if r["batch_size"] == 512 and r["policy"] == "float32")
    assert oom["status"] == "oom" and oom["speedup"] is None and oom["step_ms"]["median"] is None
    assert any(d["rule"] == "no_fp16_tensor_cores" for d in m2200["diagnosis"])


def test_a_table_that_mixes_runs_names_each_label_and_its_cells(tmp_path: Path) -> None:
    from mxbench.report.annotate import lines as heading_lines

    first = [rec("box", p, b, label="old", time="2026-01-01T00:00:00Z")
             for p in ("float32", "mixed_float16") for b in (32, 64)]  # fmt: skip
    again = [rec("box", p, 64, label="new", time="2026-01-02T00:00:00Z")
             for p in ("float32", "mixed_float16")]  # fmt: skip
    path = write(tmp_path / "box.jsonl", first + again)
    (mixed,) = build(load([path]).winners)
    assert mixed.labels == {"new": 2, "old": 2}
    assert heading_lines(mixed)[-1].startswith(
        "labels: new (2 cells), old (2 cells); each cell shows its latest run"
    )
    (alone,) = build(load([path], label="old").winners)
    assert "label: old" in heading_lines(alone)


def test_cells_of_another_run_are_marked_in_the_table_and_never_pooled(tmp_path: Path) -> None:
    from mxbench.report.document import verdict
    from mxbench.report.text import table_rows

    old = [rec("box", p, b, label="old", time="2026-01-01T00:00:00Z", median=m)
           for p, m in (("float32", 100.0), ("mixed_float16", 50.0)) for b in (32, 64)]  # fmt: skip
    # the new run re-measured float32 at batch 64 only: its speedup pairs two runs
    new = [rec("box", "float32", 64, label="new", time="2026-01-02T00:00:00Z", median=80.0)]
    path = write(tmp_path / "box.jsonl", old + new)
    (t,) = build(load([path]).winners)
    _, rows = table_rows(t)
    by_batch = {int(r[0]): r for r in rows}
    assert "(run new)" in by_batch[64][1] and "(run" not in by_batch[32][1]
    assert "(across runs: float32 of new, mixed_float16 of old)" in by_batch[64][-1]
    assert "across runs" not in by_batch[32][-1]
    assert "across runs" in verdict(t, "mixed_float16", 64).detail
    # a slot measured by two runs (same cell key, e.g. repeats) shows the latest run's only
    twice = []
    for i, (lab, day, m) in enumerate([("a", 1, 100.0), ("b", 2, 60.0)]):
        r = rec("box", "float32", 32, label=lab, time=f"2026-01-0{day}T00:00:00Z", median=m)
        r["params"]["repeat"], r["cell"] = i, f"repeat-{i}"  # two processes of one slot
        twice.append(r)
    (t2,) = build(load([write(tmp_path / "two.jsonl", twice)]).winners)
    assert t2.entries["float32", 32].median == 60.0 and t2.entries["float32", 32].run == "b"


@pytest.mark.slow
@pytest.mark.parametrize(("width", "fits"), [(380, True), (200, False)])
def test_the_answer_fits_a_narrow_window_and_opens_the_page(
    tmp_path: Path, width: int, fits: bool
) -> None:
    """In a phone-wide frame the first thing on the page is the answer grid, whole (headless
    Chromium's window is at least 500 px wide, so the page is laid out in an iframe)."""
    require_service(Path(CHROMIUM).exists(), "chromium (Debian package)")
    import html as html_text

    from mxbench.report.render import html

    from mxbench.report import document

    loaded = load([PUBLISHED])
    page = html.render(document.build(loaded, build(loaded.winners)), lambda t: [])
    probe = tmp_path / "narrow.html"
    probe.write_text(
        f'<!DOCTYPE html><html><body><iframe id="f" width="{width}" height="900" '
        f'srcdoc="{html_text.escape(page)}"></iframe><script>'
        """f.onload = () => {
          const d = f.contentDocument, w = f.contentWindow;
          const grid = d.querySelector('table.grid').getBoundingClientRect();
          const first = d.querySelector('section.device').getBoundingClientRect();
          document.body.setAttribute('data-fit', [Math.round(grid.right), w.innerWidth,
            Math.round(grid.bottom), Math.round(first.top)].join(' '));
        };</script></body></html>"""
    )
    with tempfile.TemporaryDirectory() as user_dir:
        dom = _chromium("--dump-dom", probe.as_uri(), user_dir=Path(user_dir))
    assert dom.returncode == 0, dom.stderr[-2000:]
    right, inner, bottom, first_table = map(
        int, dom.stdout.split('data-fit="', 1)[1].split('"', 1)[0].split()
    )
    assert inner <= width and (right <= inner) == fits, (right, inner)
    assert bottom < first_table  # the answer comes before any table


@pytest.mark.slow
def test_the_answer_grid_fits_a_narrow_window_whatever_the_host_name(tmp_path: Path) -> None:
    """A host name with no space to break at (a cluster node's FQDN) wraps in the grid's
    first column: in a phone-wide window the speedups stay on screen, and the page itself
    does not scroll sideways."""
    require_service(Path(CHROMIUM).exists(), "chromium (Debian package)")
    host = "gpunode0042.cluster.physics.example-university.edu" + "x" * 30
    rows = [rec(host=host, policy=p, batch=b, median=100.0 if p == "float32" else 60.0)
            for p in ("float32", "mixed_float16") for b in (8, 32, 128)]  # fmt: skip
    page = tmp_path / "report.html"
    proc = subprocess.run([sys.executable, "-m", "mxbench", "report", "-r",
                           str(write(tmp_path / "r.jsonl", rows)), "-o", str(page)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    probe = tmp_path / "probe.html"
    probe.write_text(
        page.read_text().replace(
            "</body>",
            """<script>
      const cell = document.querySelector('.grid td:last-child').getBoundingClientRect();
      document.body.setAttribute('data-fit', [Math.round(cell.right), window.innerWidth,
        document.documentElement.scrollWidth].join(' '));
    </script></body>""",
        )
    )
    with tempfile.TemporaryDirectory() as user_dir:
        dom = _chromium("--window-size=420,900", "--dump-dom", probe.as_uri(),
                        user_dir=Path(user_dir))  # fmt: skip
    assert dom.returncode == 0, dom.stderr[-2000:]
    right, width, scroll = map(int, dom.stdout.split('data-fit="', 1)[1].split('"', 1)[0].split())
    assert right <= width and scroll <= width, (right, width, scroll)
