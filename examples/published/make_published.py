"""Write the blog post's three GPU tables as mxbench result records (transcribed, not measured).

Run from the repository root: python examples/published/make_published.py
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from mxbench.cells.cell import cell_key
from mxbench.matrix.params import Params
from mxbench.records.record import SCHEMA

SOURCE = (
    "transcribed: rstudio ai-blog 2020-01-13 (mixed-precision-training), "
    "ms/step at epoch 20; not measured by mxbench"
)
# host -> (device name, compute capability, memory GiB, {batch: (mixed_float16, float32)})
# None = "-" in the post: out of memory.
TABLES: dict[str, tuple[str, str, int, dict[int, tuple[int | None, int | None]]]] = {
    "blog-v100": ("Tesla V100 16 GB", "7.0", 16, {
        32: (28, 30), 64: (52, 56), 128: (97, 106), 256: (188, 206), 512: (377, 415),
    }),
    "blog-titan-xp": ("Titan Xp 12 GB", "6.1", 12, {
        32: (44, 38), 64: (70, 70), 128: (142, 136), 256: (270, 270), 512: (518, 539),
    }),
    "blog-m2200": ("Quadro M2200 4 GB", "5.2", 4, {
        32: (186, 197), 64: (352, 375), 128: (687, 746), 256: (1000, None), 512: (None, None),
    }),
}  # fmt: skip
# GPU utilisation the post reports in its text (V100 only).
GPU_UTIL = {("blog-v100", 32): 72, ("blog-v100", 128): 78}


def model_facts(policy: str) -> dict:
    """What mxbench's bench records about blog-cnn at 256 px (the model's static facts, from
    the model's code, not from the post): parameters, FLOPs, dimensions off a multiple of 8."""
    from mxbench.bench.model import facts
    from mxbench.bench.model import harness
    from mxbench.bench.model.harness import set_policy
    from mxbench.models import blog_cnn

    p = Params(model="blog-cnn", image_size=256, policy=policy)  # type: ignore[arg-type]
    found = facts.facts(harness.prepare(p, set_policy).model, policy)
    del found["analytic_forward_flops"]
    flops = 3 * blog_cnn.forward_flops(p)
    return {**found, "name": "blog-cnn", "source": "zoo", "flops_per_example": flops,
            "flops_source": "formula", "inputs": ["256x256x3 float32"]}  # fmt: skip


def records() -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    model = {policy: model_facts(policy) for policy in ("mixed_float16", "float32")}
    for host, (name, cc, gib, rows) in TABLES.items():
        recs = out.setdefault(host, [])
        for batch, pair in rows.items():
            for policy, ms in zip(("mixed_float16", "float32"), pair, strict=True):
                params = {
                    "model": "blog-cnn", "policy": policy, "batch_size": batch,
                    "image_size": 256, "data": "imagenette/320px (v1)",
                    "jit_compile": "off",  # TF 2.1's Keras fit: no XLA
                }  # fmt: skip
                metrics: dict = {}
                if ms is not None:
                    rate = round(batch / ms * 1000, 1)
                    metrics = {"step_ms": {"median": ms}, "images_per_s": rate}
                    if (host, batch) in GPU_UTIL:
                        metrics["gpu_util_pct"] = GPU_UTIL[(host, batch)]
                recs.append({
                    "schema": SCHEMA,
                    "cell": cell_key(host, None, None, msgspec.convert(params, Params)),
                    "time": "2020-01-13T00:00:00+00:00",
                    "host": host, "engine": None, "image": {"name": None, "id": None},
                    "params": params,
                    "status": "ok" if ms is not None else "oom",
                    "metrics": metrics,
                    "device": {"kind": "gpu", "name": name, "compute_capability": cc,
                               "memory_bytes": gib * 2**30},
                    "model": model[policy],
                    "source": SOURCE,
                    "error": None if ms is not None else "out of memory (\"-\" in the post)",
                })  # fmt: skip
    return out


def main() -> None:
    here = Path(__file__).resolve().parent
    for host, recs in records().items():
        text = "".join(json.dumps(r) + "\n" for r in recs)
        (here / f"{host}.jsonl").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
