"""Where each process's wall time went, from the records a series kept: one line per
process (wall, timed share, every phase over 0.5 s), then each phase's median per process,
first processes (which also run the profile and the one-step check) and the others apart.

    python phases.py DIR [DIR ...]   (DIR: a series' *-runs folder)
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def processes(runs: Path) -> list[tuple[str, int, float, dict[str, float]]]:
    out = []
    for f in sorted(runs.glob("paired-*/results/*.jsonl")):
        seen: set[str] = set()
        for line in f.read_text().splitlines():
            r = json.loads(line)
            group = (r.get("pairing") or {}).get("group")
            phases = (r.get("metrics") or {}).get("phases_s")
            wall = (r.get("run") or {}).get("wall_s")
            if group in seen or not phases or not wall:
                continue
            seen.add(group)
            out.append((f.parts[-3], r["params"].get("repeat") or 0, wall, phases))
    return out


def main() -> None:
    for arg in sys.argv[1:]:
        procs = processes(Path(arg))
        print(f"== {arg}: {len(procs)} processes")
        for run, rep, wall, ph in procs:
            big = ", ".join(f"{k} {v:.1f}" for k, v in ph.items() if v >= 0.5)
            print(f"  {run} #{rep}: wall {wall:.1f} s, timed {ph['timed'] / wall:.0%}; {big}")
        for label, pick in (("first", lambda rep: rep == 0), ("others", lambda rep: rep > 0)):
            some = [(w, ph) for _, rep, w, ph in procs if pick(rep)]
            if not some:
                continue
            names = sorted({k for _, ph in some for k in ph}, key=lambda k: -sum(
                ph.get(k, 0.0) for _, ph in some))  # fmt: skip
            med = ", ".join(
                f"{k} {statistics.median(ph.get(k, 0.0) for _, ph in some):.1f}" for k in names
            )
            shares = [ph["timed"] / w for w, ph in some]
            print(f"  {label} ({len(some)}): wall {statistics.median(w for w, _ in some):.1f} s, "
                  f"timed share {statistics.median(shares):.0%} [{min(shares):.0%}–"
                  f"{max(shares):.0%}]; medians: {med}")  # fmt: skip


if __name__ == "__main__":
    main()
