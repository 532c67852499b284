"""Two passes in one process; the second pass's build time, with or without gc.freeze()
after the framework's import."""

import gc
import json
import sys
import time

import msgspec
from mxbench.bench.evidence import probe
from mxbench.bench.process import paired as cell_paired
from mxbench.bench.process.timing import Phases
from mxbench.matrix.params import Params
from mxbench.records.record import Cpu

freeze = sys.argv[1] == "freeze"
p = Params(
    model="blog-cnn",
    policy="float32",
    batch_size=8,
    image_size=64,
    warmup_steps=2,
    steps=2000,
    timed_s=2.0,
    profile="off",
    check="off",
    pairing="paired",
)
t0 = time.time()
import tensorflow, keras  # noqa

if freeze:
    gc.freeze()
phases = Phases(t0)
cpu = msgspec.convert(probe.cpu_info(), Cpu)
builds = []
for size in (8, 32):
    before = dict(phases.out)
    q = msgspec.structs.replace(p, batch_size=size)
    cell_paired._pass(q, ["mixed_bfloat16"], cpu, phases, "g", t0, None)
    builds.append(
        {
            k: round(v - before.get(k, 0.0), 2)
            for k, v in phases.out.items()
            if v - before.get(k, 0.0) > 0.05
        }
    )
print(
    json.dumps(
        {
            "freeze": freeze,
            "passes": builds,
            "wall": round(time.time() - t0, 1),
            "gc": gc.get_count(),
            "frozen": gc.get_freeze_count(),
        }
    )
)
