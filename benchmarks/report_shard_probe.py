"""How close could a sharded report come to `json.loads` (issue 26's goal: at most 1x)? An
upper bound, measured, for the decision whether to rebuild the report as a sharded pipeline.

Writes the same synthetic fleet as report_speed.py (one JSONL file per host), then times,
alternately and --repeats times each, in fresh processes:
  A. `json.loads` of every line (report_speed.py's A);
  B. `mxbench report --markdown` as it is;
  S. the sharded probe: N forked workers (one per usable core) each run the whole report
     (load, tables, document, markdown) on their share of the files and send the text back;
  P. S with a plain pipe-table writer in place of markdown.table (which used tabulate, whose
     guess of every cell's type runs even with disable_numparse; it now writes its pipe
     tables itself, markdown._pipe, so S and P differ only by escaping and alignment).
S and P are bounds, not reports: no shard merges cells or tables with another (true here:
hosts are disjoint), each has its own summary grids, and P's tables are not the report's.
What a real sharded report would add: merging the shards' cells, tables and summaries.

    python benchmarks/report_shard_probe.py [--records 100000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from report_speed import _JSON_LOADS, _spread, _time, write_fleet

_PROBE = """
import multiprocessing, os, sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from mxbench.report import fanout
fanout.prepare()
fanout.MIN_ITEMS = 10**9  # no fan-out inside a shard
from mxbench.report import document
from mxbench.report import load
from mxbench.report.render import markdown
from mxbench.report import tables

if sys.argv[2] == "plain":
    def _table(headers, rows):
        headers = [markdown.escape(h) for h in headers]
        rows = [[markdown.escape(c) for c in row] for row in rows]
        w = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
        def line(cells):
            return "| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(cells)) + " |"
        rule = "|" + "|".join("-" * (x + 2) for x in w) + "|"
        return "\\n".join([line(headers), rule, *map(line, rows)])
    markdown.table = _table

files = sorted(Path(sys.argv[1]).glob("*.jsonl"))
n = fanout.workers()
shards = [files[k * len(files) // n:(k + 1) * len(files) // n] for k in range(n)]

def one(k):
    with load.collector_paused():
        loaded = load.load(shards[k])
        return markdown.render(document.build(loaded, tables.build(loaded.winners)))

with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork")) as pool:
    text = "".join(pool.map(one, range(n)))
Path(sys.argv[1], "probe.md").write_text(text)
sys.stdout.flush()
os._exit(0)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3, help="runs of each, alternating")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hosts = write_fleet(root, args.records, 1)
        print(f"{args.records} records, {hosts} hosts, one file per host")
        runs = {
            "A json.loads of every line": [sys.executable, "-c", _JSON_LOADS, str(root)],
            "B mxbench report --markdown": [
                sys.executable, "-m", "mxbench", "report", "--results", str(root),
                "--markdown", "--output", str(root / "report.md"),
            ],
            "S sharded probe (tabulate)": [sys.executable, "-c", _PROBE, str(root), "tabulate"],
            "P sharded probe (plain pipe)": [sys.executable, "-c", _PROBE, str(root), "plain"],
        }  # fmt: skip
        walls: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.repeats):  # alternate, so drift on a shared machine hits all
            for name, cmd in runs.items():
                walls[name].append(_time(cmd))
        a = walls["A json.loads of every line"]
        for name, w in walls.items():
            ratio = statistics.median(y / x for x, y in zip(a, w, strict=True))
            print(f"{name:30s} {_spread(w)}; / A: median {ratio:.2f}")


if __name__ == "__main__":
    main()
