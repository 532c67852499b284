"""How fast `mxbench report --markdown` renders a large synthetic fleet (target: 100,000
records in under 3 s).

Writes full-size records (every field of docs/record.md) to a temporary results directory,
one JSONL file per host, then times the real command end to end in a fresh process
(interpreter start, reading, merging, tables, diagnosis, markdown), on one process
(--jobs 1) and on the default one per CPU, and once in-process stage by stage. The
numbers in the records are synthetic: this measures the report, not a GPU.

    python benchmarks/report_speed.py [--records 100000] [--attempts 1]

--attempts N: each cell written N times (retries), so records / N distinct cells.
--one-file: the whole fleet in one JSONL file, written host by host (cut into byte ranges);
--one-file --shuffle: its lines shuffled, hosts interleaved (split by host shard).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mxbench.bench.probe import ISA_FLAGS
from mxbench.cells import cell_key
from mxbench.results import SCHEMA

POLICIES = ("float32", "mixed_float16", "mixed_bfloat16", "float16")
BATCHES = (16, 32, 64, 128, 256)
GPUS = (("Tesla V100-SXM2-16GB", "7.0"), ("NVIDIA A100-SXM4-40GB", "8.0"),
        ("NVIDIA TITAN Xp", "6.1"), ("Quadro M2200", "5.2"))  # fmt: skip

# A real /proc/cpuinfo flags line (a Xeon with AVX-512 and AMX), kept as the probe keeps it.
_FLAGS_LINE = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr "
    "sse sse2 ss ht syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc "
    "cpuid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt "
    "aes xsave avx f16c rdrand hypervisor lahf_lm abm 3dnowprefetch ssbd ibrs ibpb stibp "
    "ibrs_enhanced fsgsbase tsc_adjust bmi1 hle avx2 smep bmi2 erms invpcid rtm avx512f "
    "avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl "
    "xsaveopt xsavec xgetbv1 xsaves avx_vnni avx512_bf16 arat avx512vbmi umip pku ospke "
    "waitpkg avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid "
    "cldemote movdiri movdir64b fsrm md_clear serialize tsxldtrk amx_bf16 avx512_fp16 amx_tile "
    "amx_int8 arch_capabilities"
)
FLAGS = sorted(ISA_FLAGS.intersection(_FLAGS_LINE.split()))


def record(rng: random.Random, host: int, policy: str, batch: int, attempt: int) -> dict:
    name, cc = GPUS[host % len(GPUS)]
    params = {"model": "blog-cnn", "policy": policy, "batch_size": batch, "image_size": 256,
              "data": "synthetic", "warmup_steps": 5, "steps": 50,
              "jit_compile": "auto"}  # fmt: skip
    med = batch * rng.uniform(0.5, 1.5)
    status = "ok" if attempt or rng.random() > 0.05 else rng.choice(("oom", "error", "timeout"))
    return {
        "schema": SCHEMA, "cell": cell_key(f"host{host}", "gpu", None, params),
        "time": f"2026-11-21T12:{attempt:02d}:00+00:00", "host": f"host{host}",
        "engine": "docker",
        "image": {"name": "gpu", "id": "sha256:" + "ab" * 32,
                  "labels": {"io.mxbench.tf-version": "2.21.0", "io.mxbench.isa-claim": ""}},
        "params": params, "status": status,
        "metrics": {"step_ms": {"median": med, "p25": med * 0.98, "p75": med * 1.02,
                                "mean": med, "min": med * 0.9, "max": med * 1.2, "n": 50},
                    "images_per_s": batch / med * 1000, "first_step_ms": 3000.0,
                    "warmup_ms": 4000.0, "startup_s": 9.0, "loss_first": 2.3, "loss_last": 2.2,
                    "loss_scale": 32768.0, "peak_memory_bytes": 2**33, "peak_memory_kind": "gpu",
                    "gpu_util_pct": rng.uniform(60, 100), "train_flops_per_image": 8.8e9,
                    "achieved_tflops": rng.uniform(5, 50)},
        "device": {"kind": "gpu", "name": name, "compute_capability": cc,
                   "memory_bytes": 2**34, "driver": "550.54", "uuid": f"GPU-{host}",
                   "used_by_tf": True, "present_gpus": [{"name": name, "compute_capability": cc}],
                   "cc_source": "nvml"},
        "cpu": {"model": "Intel(R) Xeon(R) Gold 6248", "arch": "x86_64", "cores": 40,
                "flags": FLAGS,
                "tf_not_compiled_for": ["AVX2", "AVX512F", "FMA"]},
        "software": {"python": "3.11.7", "tensorflow": "2.21.0", "keras": "3.12.0",
                     "backend": "tensorflow", "cuda": "12.5", "cudnn": "9.3",
                     "cuda_compute_capabilities": ["sm_60", "sm_70", "sm_80", "sm_89"],
                     "mxbench": "0.1.0"},
        "settings": {"jit_compile": False, "tf32": True, "onednn": None, "xla_flags": None,
                     "compute_dtype": "float16", "variable_dtype": "float32",
                     "loss_scaling": True, "pure_float16": policy == "float16"},
        "run": {"wall_s": 30.0, "container": "c" * 12},
        "error": None if status == "ok" else "synthetic failure",
    }  # fmt: skip


def write_fleet(root: Path, records: int, attempts: int, one_file: bool = False) -> int:
    rng = random.Random(0)
    per_host = len(POLICIES) * len(BATCHES) * attempts
    hosts = -(-records // per_host)
    written = 0
    for h in range(hosts):
        lines = []
        for attempt in range(attempts):
            for p in POLICIES:
                for b in BATCHES:
                    if written < records:
                        lines.append(json.dumps(record(rng, h, p, b, attempt)))
                        written += 1
        name = "fleet.jsonl" if one_file else f"host{h}.jsonl"
        with open(root / name, "a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
    return hosts


def _time_command(root: Path, jobs: int) -> float:
    cmd = [sys.executable, "-m", "mxbench", "report", "--results", str(root), "--markdown",
           "--output", str(root / "report.md"), "--jobs", str(jobs)]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"report failed: {proc.stderr.strip()}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--attempts", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3, help="end-to-end runs per setting")
    ap.add_argument("--one-file", action="store_true", help="the whole fleet in one JSONL file")
    ap.add_argument("--shuffle", action="store_true",
                    help="with --one-file: hosts interleaved line by line")  # fmt: skip
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hosts = write_fleet(root, args.records, args.attempts, args.one_file)
        if args.one_file and args.shuffle:
            lines = (root / "fleet.jsonl").read_text().splitlines()
            random.Random(0).shuffle(lines)
            (root / "fleet.jsonl").write_text("\n".join(lines) + "\n")
        size = sum(f.stat().st_size for f in root.iterdir()) / 2**20
        layout = "one file per host"
        if args.one_file:
            layout = "one file, hosts interleaved" if args.shuffle else "one file, host by host"
        print(f"{args.records} records, {hosts} hosts, {args.attempts} attempt(s) per cell, "
              f"{size:.0f} MiB of JSONL, {layout}")  # fmt: skip

        from mxbench.report import fanout, load, render, tables

        gc.disable()  # as the command does
        t0 = time.perf_counter()
        loaded = load.load([root])
        t1 = time.perf_counter()
        built = tables.build(loaded.winners)
        t2 = time.perf_counter()
        text = render.markdown(loaded, built)
        t3 = time.perf_counter()
        gc.enable()
        n_tables = len(built)
        del loaded, built
        mib = len(text) / 2**20
        print(f"in one process: load {t1 - t0:.2f} s, tables {t2 - t1:.2f} s, "
              f"markdown {t3 - t2:.2f} s ({n_tables} tables, "
              f"{mib:.1f} MiB)")  # fmt: skip

        cpus = fanout.usable_cpus()
        for jobs in sorted({1, fanout.default_jobs()}):
            walls = sorted(_time_command(root, jobs) for _ in range(args.repeats))
            wall = statistics.median(walls)
            verdict = "OK" if wall < 3.0 else "TOO SLOW"
            print(f"mxbench report --markdown --jobs {jobs}: median {wall:.2f} s of "
                  f"{', '.join(f'{w:.2f}' for w in walls)} (target < 3 s: {verdict})")  # fmt: skip
        print(f"{cpus} usable CPUs, load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
