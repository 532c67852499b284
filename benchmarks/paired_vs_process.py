"""The embedded default, paired design against one policy per process, quiet or under load.

Runs ``mxbench run`` on the embedded default matrix (this machine's CPU) ``--runs`` times per
design, the designs alternating run by run (A B, B A, ...), each run in a fresh results
directory; with ``--load bursty`` a competing load (benchmarks/bursty_load.py: one core
busy for random 0.2-2 s spells, idle for random 0.2-2 s) runs through every run. For each run
it prints the wall time, each batch size's verdict and estimate, and the timed windows' share
of each process's wall time (the lowest and the median); then, per design, the medians with
their range, and, given a quiet independent reference (benchmarks/reference_loop.py), whether
each verdict agrees with it (reference >= 1.1x: the run must say faster, <= 1/1.1x slower;
its estimate, as a ratio, within 20 % of the reference's).

- ``paired``: the embedded default as it is (pairing: paired, repeats: auto from 2).
- ``process``: the design before Step 18: pairing: process, 10 timed steps, 3 processes per
  cell to start, at most 6, budget 240 s (the stopping rule is today's).
- ``aa``: an A/A run of the paired design (float32 against itself, ``mxbench doctor
  --noise 2``): its verdict is false unless it is "no clear difference".

    python benchmarks/paired_vs_process.py [--runs 5] [--load none|bursty]
        [--designs paired,process] [--reference 8=1.35,32=1.45] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SENTENCE = re.compile(
    r"^mixed_bfloat16(?: is (?P<x>[\d.]+)× \[[\d.]+–[\d.]+\] (?P<v>faster|slower)"
    r"|: (?P<same>no clear difference)|: (?P<few>[\d.]+)× the speed)"
)
SAME_AT = re.compile(r"\((?P<x>[\d.]+)× \[[\d.]+–[\d.]+\]\)\s*$")
BATCH = re.compile(r"at batch (?P<b>\d+)")
AA = re.compile(r"A/A verdict: (?P<v>[a-z ]+?)(?:, (?P<x>[\d.]+)×)?\)")


def matrix(design: str) -> str:
    text = resources.files("mxbench").joinpath("defaults/local.yaml").read_text()
    if design == "process":
        text = re.sub(r"  steps: \d+\n", "  steps: 10\n  pairing: process\n", text)
        old = "auto_repeats: {start: 3, target: 0.03, max: 6, budget_s: 240}"
        text = re.sub(r"auto_repeats: \{[^}]*\}", old, text)
    return text


def shares(results: Path) -> list[float]:
    """Timed windows / wall time of each process (a paired process counted once)."""
    seen: set[str] = set()
    out = []
    for f in results.glob("*.jsonl"):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            group = (r.get("pairing") or {}).get("group") or r.get("cell")
            wall = (r.get("run") or {}).get("wall_s")
            timed = ((r.get("metrics") or {}).get("phases_s") or {}).get("timed")
            if group in seen or not wall or timed is None:
                continue
            seen.add(group)
            out.append(timed / wall)
    return out


def one(design: str, where: Path) -> dict[str, Any]:
    where.mkdir(parents=True, exist_ok=True)
    exe = [sys.executable, "-m", "mxbench"]
    t0 = time.monotonic()
    if design == "aa":
        proc = subprocess.run([*exe, "doctor", "--noise", "2", "-r", str(where)],
                              capture_output=True, text=True)  # fmt: skip
        wall = time.monotonic() - t0
        m = AA.search(proc.stdout)
        return {"wall": wall, "aa": m["v"] if m else f"failed: {proc.stderr[-300:]}",
                "x": float(m["x"]) if m and m["x"] else None, "shares": []}  # fmt: skip
    path = where / "matrix.yaml"
    path.write_text(matrix(design))
    proc = subprocess.run([*exe, "run", "-m", str(path), "-r", str(where / "results")],
                          capture_output=True, text=True)  # fmt: skip
    wall = time.monotonic() - t0
    (where / "transcript.txt").write_text(proc.stderr + proc.stdout)  # what the user saw
    verdicts: dict[int, tuple[str, float | None]] = {}
    for line in proc.stdout.splitlines():
        m, at = SENTENCE.search(line.strip()), BATCH.search(line)
        if not m or not at:
            continue
        b = int(at["b"])
        if m["v"]:
            verdicts[b] = (m["v"], float(m["x"]))
        elif m["same"]:
            same = SAME_AT.search(line.strip())
            verdicts[b] = ("same", float(same["x"]) if same else None)
        else:
            verdicts[b] = ("too few", float(m["few"]))
    if proc.returncode not in (0, 1):
        print(proc.stderr[-2000:], file=sys.stderr)
    return {"wall": wall, "verdicts": verdicts, "shares": shares(where / "results")}


def spread(xs: list[float], fmt: str = "{:.2f}") -> str:
    if not xs:
        return "-"
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}–{fmt.format(max(xs))}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--load", choices=["none", "bursty"], default="none")
    ap.add_argument("--designs", default="paired,process")
    ap.add_argument("--reference", default="", help="8=1.35,32=1.45: the quiet reference")
    ap.add_argument("--keep", type=Path, default=None, help="keep every run's results here")
    args = ap.parse_args()
    designs = args.designs.split(",")
    ref = {int(k): float(v) for k, v in (x.split("=") for x in args.reference.split(",") if x)}
    root = args.keep or Path(tempfile.mkdtemp(prefix="mxbench-paired-"))
    load = None
    if args.load == "bursty":
        load = subprocess.Popen([sys.executable, str(HERE / "bursty_load.py")])
    got: dict[str, list[dict[str, Any]]] = {d: [] for d in designs}
    try:
        for i in range(args.runs):
            order = designs if i % 2 == 0 else designs[::-1]
            for d in order:
                r = one(d, root / f"{d}-{i}")
                got[d].append(r)
                said = r.get("aa") or ", ".join(
                    f"bs {b}: {v} {x:.2f}x" if x else f"bs {b}: {v}"
                    for b, (v, x) in sorted(r["verdicts"].items())
                )
                low = f"{min(r['shares']):.0%}" if r["shares"] else "-"
                print(f"run {i + 1} {d:8s} load={args.load}: {r['wall']:.0f} s; {said}; "
                      f"timed share min {low}", flush=True)  # fmt: skip
    finally:
        if load is not None:
            load.kill()
    print()
    for d, runs in got.items():
        walls = spread([r["wall"] for r in runs], "{:.0f}")
        print(f"{d} (load={args.load}, {len(runs)} runs): wall {walls} s")
        if d == "aa":
            false = sum(1 for r in runs if r["aa"] != "no clear difference")
            print(f"  A/A false verdicts: {false}/{len(runs)}; estimates "
                  f"{spread([r['x'] for r in runs if r['x']], '{:.3f}')}")  # fmt: skip
            continue
        every = [s for r in runs for s in r["shares"]]
        print(f"  timed share per process: {spread(every, '{:.2f}')}")
        for b in sorted({b for r in runs for b in r["verdicts"]}):
            vs = [r["verdicts"].get(b, ("missing", None)) for r in runs]
            xs = [x for _, x in vs if x]
            counts = {v: sum(1 for w, _ in vs if w == v) for v in {w for w, _ in vs}}
            line = f"  batch {b}: verdicts {counts}, estimate {spread(xs, '{:.2f}')}"
            if b in ref:
                truth = ref[b]
                want = "faster" if truth >= 1.1 else "slower" if truth <= 1 / 1.1 else None
                # a "slower" sentence gives the inverse ratio (10.8x slower: 0.093)
                ok = sum(1 for v, x in vs if x is not None and v == (want or v)
                         and abs((x if v != "slower" else 1 / x) / truth - 1) <= 0.2)  # fmt: skip
                line += f"; agree with the reference {truth:.2f}x: {ok}/{len(vs)}"
            print(line)
    print(f"results kept in {root}")


if __name__ == "__main__":
    main()
