"""A competing bursty load: one core busy for random spells, idle for random spells.

Busy for a uniform random 0.2-2 s, idle for a uniform random 0.2-2 s, again and again (the
load Step 18's targets are stated under: a machine in use, not a steady hog that a
scheduler would simply share out). Runs until killed, or for --seconds.

    python benchmarks/bursty_load.py [--seconds 600] [--seed 1] [--low 0.2] [--high 2.0]
"""

from __future__ import annotations

import argparse
import random
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=float("inf"))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--low", type=float, default=0.2)
    ap.add_argument("--high", type=float, default=2.0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    end = time.monotonic() + args.seconds
    busy_s = idle_s = 0.0
    while time.monotonic() < end:
        spell = rng.uniform(args.low, args.high)
        stop = time.monotonic() + spell
        x = 0
        while time.monotonic() < stop:  # one core, busy
            for _ in range(10_000):
                x += 1
        busy_s += spell
        spell = rng.uniform(args.low, args.high)
        time.sleep(spell)
        idle_s += spell
    print(f"busy {busy_s:.1f} s, idle {idle_s:.1f} s")


if __name__ == "__main__":
    main()
