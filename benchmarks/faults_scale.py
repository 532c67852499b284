"""Scale figures of Step 16: `mxbench compare` of many records, and hashing a large image
context (`mxbench doctor` / `mxbench run` on a docker host) before and after the digest cache.

compare: writes --records full-size records (report_speed.record: 50 samples + losses
each) as BASE and again (another seed) as NEW, then times `mxbench compare BASE NEW` in
fresh processes, --repeats times, and prints the wall time and the peak memory (max RSS)
as median [min - max]; with --baseline DIR (runner/ of an older checkout) that code's
compare too, alternating.

context: writes --context-mib MiB of files (64 MiB each) next to a Dockerfile, then, in
fresh processes and alternating, times `mxbench doctor` on a docker host whose image uses
that context: "cold" (an empty digest cache: every byte read), "warm" (the cache of the
previous run), and, with --baseline DIR (a runner/ directory of an older checkout, put on
PYTHONPATH), the older code. Needs the Docker daemon (doctor reaches it; the image need
not exist: the content hash is computed either way).

    python benchmarks/faults_scale.py compare [--records 1000000] [--repeats 3]
    python benchmarks/faults_scale.py context [--context-mib 4096] [--baseline ../main/runner]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report_speed import BATCHES, POLICIES, record

_PEAK = """
import resource, subprocess, sys
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
if proc.returncode not in (0, 1):
    sys.exit(proc.stderr[-2000:])
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def measure(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of ``cmd`` in a fresh process."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _PEAK, *cmd], capture_output=True, text=True,
                         env=env, check=False)  # fmt: skip
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd[:4])} failed: {out.stderr.strip()[-1000:]}")
    return wall, int(out.stdout.split()[-1]) / 1024


def spread(values: list[float], unit: str) -> str:
    return (f"{statistics.median(values):.1f} {unit} "
            f"[{min(values):.1f} - {max(values):.1f}]")  # fmt: skip


def write_side(path: Path, n: int, seed: int) -> None:
    """``n`` records, 20 cells a host, in one file per 1000 hosts."""
    rng = random.Random(seed)
    path.mkdir()
    written, host = 0, 0
    while written < n:
        with open(path / f"part{host // 1000}.jsonl", "a", encoding="utf-8") as fh:
            for p in POLICIES:
                for b in BATCHES:
                    if written < n:
                        rec = record(rng, host, p, b, 1)
                        rec["status"] = "ok"
                        fh.write(json.dumps(rec) + "\n")
                        written += 1
        host += 1


def compare(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base, new = Path(tmp) / "base", Path(tmp) / "new"
        write_side(base, args.records, 0)
        write_side(new, args.records, 1)
        mib = sum(f.stat().st_size for f in Path(tmp).rglob("*.jsonl")) / 2**20
        print(f"compare: {args.records} records per side, {mib:.0f} MiB of JSONL in all")
        cmd = [sys.executable, "-m", "mxbench", "compare", str(base), str(new), "--json"]
        variants = {"this": None}
        if args.baseline:
            variants["baseline"] = {**os.environ, "PYTHONPATH": args.baseline}
        walls: dict[str, list[float]] = {k: [] for k in variants}
        peaks: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(args.repeats):
            for name, env in variants.items():
                wall, peak = measure(cmd, env)
                walls[name].append(wall)
                peaks[name].append(peak)
                print(f"  {name}: {wall:.1f} s, peak RSS {peak:.0f} MiB", flush=True)
        for name in variants:
            print(f"mxbench compare ({name}): wall {spread(walls[name], 's')}, "
                  f"peak RSS {spread(peaks[name], 'MiB')}")  # fmt: skip


def context(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ctx = Path(tmp) / "ctx"
        ctx.mkdir()
        (ctx / "Dockerfile").write_text("FROM scratch\nCOPY . /data\n")
        block = os.urandom(2**20)
        for i in range(max(1, args.context_mib // 64)):
            with open(ctx / f"blob{i:04d}.bin", "wb") as fh:
                for _ in range(64):
                    fh.write(block)
        time.sleep(2.5)  # older than the digest cache's racy window
        matrix = ctx / "matrix.yaml"
        matrix.write_text(json.dumps({
            "images": {"big": {"dockerfile": "Dockerfile"}},
            "hosts": [{"name": "big", "engine": "docker", "images": ["big"]}],
        }))  # fmt: skip
        cache = Path(tmp) / "cache"
        base_env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
        here = str(Path(__file__).resolve().parents[1] / "runner")
        variants = {
            "cold": ({**base_env, "PYTHONPATH": here}, True),
            "warm": ({**base_env, "PYTHONPATH": here}, False),
        }
        if args.baseline:
            variants["baseline"] = ({**base_env, "PYTHONPATH": args.baseline}, False)
        print(f"context: {args.context_mib} MiB in {max(1, args.context_mib // 64)} files")
        cmd = [sys.executable, "-m", "mxbench", "doctor", "--matrix", str(matrix)]
        walls: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(args.repeats):
            for name, (env, clear) in variants.items():
                if clear:  # "cold" empties the cache, and fills it for "warm" after it
                    shutil.rmtree(cache, ignore_errors=True)
                wall, _ = measure(cmd, env)
                walls[name].append(wall)
                print(f"  {name}: {wall:.2f} s", flush=True)
        for name, values in walls.items():
            print(f"mxbench doctor, {name:>8}: {spread(values, 's')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("compare")
    c.add_argument("--records", type=int, default=1_000_000)
    c.add_argument("--repeats", type=int, default=3)
    c.add_argument("--baseline", help="runner/ of an older checkout, for 'before' figures")
    x = sub.add_parser("context")
    x.add_argument("--context-mib", type=int, default=4096)
    x.add_argument("--repeats", type=int, default=3)
    x.add_argument("--baseline", help="runner/ of an older checkout, for 'before' figures")
    args = ap.parse_args()
    compare(args) if args.what == "compare" else context(args)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
