"""How fast `mxbench report --markdown` renders a large synthetic fleet, against the time
plain `json.loads` takes over the same lines (the goal: the report is no slower).

Writes full-size records (every field of docs/record.md, with 50 raw step samples and
losses each) to a temporary results directory, one JSONL file per host (or one file with
--one-file), then times, alternately and --repeats times each, in fresh processes:
  A. `python -c` reading every line of the files with json.loads (nothing else);
  B. `mxbench report --markdown` (interpreter start, decoding, merging, tables, speedup
     intervals, diagnosis, markdown);
  C. with --baseline DIR (the runner/ folder of an older checkout, put on PYTHONPATH): B
     with that code, for before / after figures under the same load;
and prints medians with the spread, the ratio B / A (of wall times, and of CPU seconds with
the workers': the steadier one on a shared machine), the peak memory of B (its process and
its workers, summed PSS, Linux; sampled in one more, untimed run; and the process's own
ru_maxrss), the SHA-256 of every run's output (B's and C's must be one), and B's stages
timed in one fresh process. The numbers in the records are synthetic: this measures the
report, not a GPU.

--minimal writes records of the contract minimum instead (schema, cell, host, status,
params: no numbers), 10 a table and 2 tables a host: 100,000 of them are 10,000 tables,
the fleet where the report's cost is per table, not per byte (goal: B / A <= 4; the full
records' goal is <= 2).

--shape builds the fleet from records committed in this repository, the shapes users have,
copied until it holds --records records (each copy of a file is a host of its own: its host
names, cell keys and paired groups made unique; every other byte as committed):
  published  examples/published (the experiment's published tables: 30 records, 3 tables a
             copy; 100,000 records are 10,002 tables);
  bench      full bench records: examples/measured/*/results, benchmarks/records'
             h100-process-gpu and cpu-torch-independent (134 records, 11 tables a copy);
  paired     paired records: benchmarks/records/cpu-step18-series (10 runs), h100-paired-gpu,
             h200-paired-*, cpu-jax-resnet50-map (158 records, 16 tables a copy);
  serving    serving cells (mode infer: latency percentiles, the gate): cpu-serving-resnet50,
             h200-serving, examples/serving-trained;
  training   training runs to an accuracy (epochs): examples/training, examples/so-question.
It times in this process (--fresh: in fresh processes, as above), alternately: A, every line
of every file through json.loads, and B, the report of --format (markdown; json, html) made
and written, the report's own entry point; each run after one untimed run of each (imports,
caches) (goal for every shape: B / A <= 4); with --fresh --baseline DIR, C too, after B in
every round, and B / C round by round. Several shapes (and formats), comma-separated, are
timed side by side: every fleet's A then B in each round, so the machine's drift hits them
all (--records: one for every shape, or one a shape).

    python benchmarks/report_speed.py [--records 100000] [--attempts 1] [--one-file]
                                      [--minimal] [--baseline ../main/runner]
    python benchmarks/report_speed.py --shape published|bench|paired [--records 20000]
                                      [--format markdown] [--fresh] [--profile]
                                      [--baseline ../main/runner (with --fresh)]
    python benchmarks/report_speed.py --shape published,bench,paired \
                                      --records 100000,20000,10000 --format markdown,json
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import json
import os
import pstats
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from mxbench.bench.evidence.probe import ISA_FLAGS
from mxbench.cells.cell import cell_key
from mxbench.matrix.params import Params
from mxbench.records.record import SCHEMA

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


def record(
    rng: random.Random, host: int, policy: str, batch: int, attempt: int, steps: int = 50
) -> dict:
    """One full-size record with ``steps`` raw step samples and losses."""
    name, cc = GPUS[host % len(GPUS)]
    params = {"model": "blog-cnn", "policy": policy, "batch_size": batch, "image_size": 256,
              "data": "synthetic", "warmup_steps": 5, "steps": 50,
              "jit_compile": "auto", "backend": "tensorflow"}  # fmt: skip
    med = batch * rng.uniform(0.5, 1.5)
    samples = [round(med * rng.uniform(0.95, 1.08), 4) for _ in range(steps)]
    status = "ok" if attempt or rng.random() > 0.05 else rng.choice(("oom", "error", "timeout"))
    return {
        "schema": SCHEMA, "cell": cell_key(f"host{host}", "gpu", None, Params(**params)),
        "time": f"2026-11-21T12:{attempt:02d}:00+00:00", "host": f"host{host}",
        "engine": "docker",
        "image": {"name": "gpu", "id": "sha256:" + "ab" * 32,
                  "labels": {"io.mxbench.tf-version": "2.21.0", "io.mxbench.isa-claim": ""}},
        "params": params, "status": status,
        "metrics": {"step_ms": {"median": med, "p25": med * 0.98, "p75": med * 1.02,
                                "mean": med, "min": med * 0.9, "max": med * 1.2, "n": 50,
                                "samples": samples},
                    "losses": [round(2.3 - i * 0.001, 6) for i in range(steps)],
                    "images_per_s": batch / med * 1000, "first_step_ms": 3000.0,
                    "warmup_ms": 4000.0, "startup_s": 9.0, "loss_first": 2.3, "loss_last": 2.2,
                    "loss_scale": 32768.0, "peak_memory_bytes": 2**33, "peak_memory_kind": "gpu",
                    "gpu_util_pct": rng.uniform(60, 100), "train_flops_per_image": 8.8e9,
                    "achieved_tflops": rng.uniform(5, 50)},
        "device": {"kind": "gpu", "name": name, "compute_capability": cc,
                   "memory_bytes": 2**34, "driver": "550.54", "uuid": f"GPU-{host}",
                   "used_gpu": True, "present_gpus": [{"name": name, "compute_capability": cc}],
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


MINIMAL_POLICIES, MINIMAL_SIZES = ("float32", "mixed_float16"), (128, 256)


def minimal(host: int, policy: str, batch: int, image_size: int) -> dict:
    """A record of the contract minimum (schema, cell, host, status, params): no numbers."""
    params = {"model": "blog-cnn", "policy": policy, "batch_size": batch,
              "image_size": image_size}  # fmt: skip
    return {"schema": SCHEMA, "cell": cell_key(f"host{host}", None, None, Params(**params)),
            "host": f"host{host}", "status": "ok", "params": params}  # fmt: skip


def write_minimal(root: Path, records: int) -> int:
    """Minimal records, 10 a table (2 policies x 5 batch sizes), 2 tables (image sizes) a
    host, one file per host: 100,000 records are 10,000 tables."""
    per_host = len(MINIMAL_POLICIES) * len(BATCHES) * len(MINIMAL_SIZES)
    hosts = -(-records // per_host)
    written = 0
    for h in range(hosts):
        lines = []
        for size in MINIMAL_SIZES:
            for p in MINIMAL_POLICIES:
                for b in BATCHES:
                    if written < records:
                        lines.append(json.dumps(minimal(h, p, b, size)))
                        written += 1
        (root / f"host{h}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return hosts


def write_fleet(
    root: Path, records: int, attempts: int, one_file: bool = False, steps: int = 50
) -> int:
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
                        lines.append(json.dumps(record(rng, h, p, b, attempt, steps)))
                        written += 1
        name = "fleet.jsonl" if one_file else f"host{h}.jsonl"
        with open(root / name, "a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
    return hosts


ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "benchmarks" / "records"
SHAPES: dict[str, list[str]] = {
    "published": ["examples/published/*.jsonl"],
    "bench": ["examples/measured/*/results/*.jsonl", "benchmarks/records/h100-process-gpu.jsonl",
              "benchmarks/records/cpu-torch-independent/*.jsonl"],
    "paired": ["benchmarks/records/cpu-step18-series/*/paired-*/*.jsonl",
               "benchmarks/records/h100-paired-gpu.jsonl",
               "benchmarks/records/h200-paired-*.jsonl",
               "benchmarks/records/cpu-jax-resnet50-map/*.jsonl"],
    "serving": ["benchmarks/records/cpu-serving-resnet50/results.jsonl",
                "benchmarks/records/h200-serving.jsonl",
                "examples/serving-trained/results*/local.jsonl"],
    "training": ["examples/training/results*/local.jsonl",
                 "examples/so-question/results-train/local.jsonl"],
}  # fmt: skip


def shape_files(shape: str) -> list[Path]:
    return [f for pattern in SHAPES[shape] for f in sorted(ROOT.glob(pattern))]


def _copy(rec: dict, copy: int, index: int) -> dict:
    """A record as copy ``copy`` of file ``index`` has it: a host, cell and paired group of
    its own, every other part as committed."""
    tag = f"{copy}-{index}"
    if rec.get("host") is not None:
        rec["host"] = f"{rec['host']}-{tag}"
    if rec.get("cell") is not None:
        rec["cell"] = hashlib.sha256(f"{rec['cell']}/{tag}".encode()).hexdigest()[:16]
    pairing = rec.get("pairing")
    if isinstance(pairing, dict) and pairing.get("group"):
        pairing["group"] = f"{pairing['group']}-{tag}"
    return rec


def write_shape(root: Path, shape: str, records: int) -> int:
    """Copies of the shape's committed files, one file per copy of each, until ``records``
    records are written (the last copy cut short); the number of copies."""
    sources = [
        [json.loads(line) for line in f.read_bytes().splitlines() if line.strip()]
        for f in shape_files(shape)
    ]
    written = copy = 0
    while written < records:
        for index, recs in enumerate(sources):
            take = recs[: records - written]
            if take:
                lines = [json.dumps(_copy(json.loads(json.dumps(r)), copy, index)) for r in take]
                (root / f"c{copy:05d}-{index:02d}.jsonl").write_text(
                    "\n".join(lines) + "\n", encoding="utf-8"
                )
                written += len(take)
        copy += 1
    return copy


_JSON_LOADS = """
import json, pathlib, sys
n = 0
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.jsonl")):
    with open(path, "rb") as fh:
        for line in fh:
            if line.strip():
                json.loads(line)
                n += 1
print(n)
"""


# B's stages, in a fresh process (numpy's BLAS threads kept to one, as the command does).
_STAGES = """
import sys, time
from mxbench.report import fanout
fanout.prepare()
from mxbench.report import document
from mxbench.report import load
from mxbench.report.render import markdown
from mxbench.report import tables
with load.collector_paused():
    t0 = time.perf_counter()
    loaded = load.load([sys.argv[1]])
    t1 = time.perf_counter()
    built = tables.build(loaded.winners)
    t2 = time.perf_counter()
    doc = document.build(loaded, built)
    t3 = time.perf_counter()
    text = markdown.render(doc)
    t4 = time.perf_counter()
print(f"in one process: load {t1 - t0:.2f} s, tables + intervals {t2 - t1:.2f} s, "
      f"document (grids, totals) {t3 - t2:.2f} s, markdown with its sections made and "
      f"rendered {t4 - t3:.2f} s ({fanout.workers() if fanout.can_fork() else 1} process(es); "
      f"{len(built)} tables, {len(text) / 2**20:.1f} MiB)")
"""


def _pss_kib(pid: int) -> int:
    """The proportional set size of a process and its children (0 when unknown)."""
    total = 0
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        for p in [str(pid), *children]:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
    except (OSError, ValueError):
        pass
    return total


# CPU seconds (user + system) of each run, its workers included, beside the wall figures:
# on a shared 2-core machine other people's work stretches B's wall time (several
# processes) more than A's (one), and CPU time much less
cpu: dict[str, list[float]] = {}


def _time(cmd: list[str], env: dict[str, str] | None = None, name: str = "") -> float:
    """Wall seconds of one run, left alone while it runs (its CPU seconds into ``cpu``)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env=env, check=False)  # fmt: skip
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"{cmd[:4]} failed: {proc.stderr.strip()[-500:]}")
    used = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
    cpu.setdefault(name, []).append(used)
    return wall


def _digest(path: Path) -> str:
    """The first 16 hex digits of the SHA-256 of a report's output."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _peak_kib(cmd: list[str], env: dict[str, str] | None = None) -> tuple[int, int]:
    """The peak PSS (KiB) of one more run with its children, sampled every 20 ms, and the
    main process's own peak resident set (ru_maxrss, KiB). Never a timed run: reading
    smaps_rollup takes the process's memory-map lock, and sampling the timed runs made
    them about a third slower (9.6 s against 6.9 s, 100,000 records)."""
    peak = 0
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return peak, usage.ru_maxrss
        peak = max(peak, _pss_kib(proc.pid))
        time.sleep(0.02)


def _spread(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})"
    )


def _ratios(
    name: str,
    walls: list[float],
    a: list[float],
    goal: str = "",
    keys: tuple[str, str] | None = None,
) -> None:
    """The runs' wall times, their ratios to A's, and the same in CPU seconds (``keys``:
    A's and this one's names in ``cpu``; else "A" and the name's first letter)."""
    ka, kb = keys or ("A", name[0])
    ratios = [y / x for x, y in zip(a, walls, strict=True)]
    print(f"{name:32s}{_spread(walls)}")
    print(f"{name[0]} / A: median {statistics.median(ratios):.2f} "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f}){goal}")  # fmt: skip
    used = [y / x for x, y in zip(cpu[ka], cpu[kb], strict=True)]
    print(f"{name[0]} / A in CPU seconds: median {statistics.median(used):.2f} "
          f"(min {min(used):.2f}, max {max(used):.2f}); {name[0]} "
          f"{_spread(cpu[kb])}, A {_spread(cpu[ka])}")  # fmt: skip


def _memory(name: str, report: list[str], env: dict[str, str] | None) -> None:
    pss, rss = _peak_kib(report, env)
    print(f"{name} peak memory (one more run): PSS with its workers {pss / 2**10:.0f} MiB, "
          f"ru_maxrss of the report's process {rss / 2**10:.0f} MiB")  # fmt: skip


def _loads_here(root: Path) -> int:
    """A in this process: every line of every file through json.loads."""
    n = 0
    for path in sorted(root.glob("*.jsonl")):
        with open(path, "rb") as fh:
            for line in fh:
                if line.strip():
                    json.loads(line)
                    n += 1
    return n


SUFFIX = {"markdown": ".md", "json": ".json", "html": ".html"}


def _report_here(root: Path, fmt: str) -> Path:
    """B in this process: the report command's own function, its output written to a file."""
    from mxbench.commands.report import report

    out = root / f"report{SUFFIX[fmt]}"
    report(results=[root], markdown=fmt == "markdown", csv=False, html=fmt == "html",
           json_=fmt == "json", label=None, output=[out])  # fmt: skip
    return out


def _timed_here(work: Callable[[], object], name: str) -> float:
    """Wall seconds of one run in this process (its CPU seconds, forked workers' included,
    into ``cpu``), after a collection outside the timing."""
    gc.collect()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    c0, t0 = time.process_time(), time.perf_counter()
    work()
    wall, used = time.perf_counter() - t0, time.process_time() - c0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    used += r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
    cpu.setdefault(name, []).append(used)
    return wall


def _profile(root: Path, fmt: str, top: int = 30) -> None:
    """One more report in this process under cProfile, in one process (no forked workers,
    whose work cProfile does not see): its top costs, by own time and by cumulative time."""
    from mxbench.report import fanout

    was, fanout.MIN_ITEMS = fanout.MIN_ITEMS, 2**62
    prof = cProfile.Profile()
    try:
        prof.runcall(_report_here, root, fmt)
    finally:
        fanout.MIN_ITEMS = was
    for order in ("tottime", "cumulative"):
        print(f"--- profile, one process, by {order}")
        pstats.Stats(prof, stream=sys.stdout).sort_stats(order).print_stats(top)


def _fleets(args: argparse.Namespace) -> list[tuple[str, int, str]]:
    """(shape, records, format) of each fleet --shape and --records name (a list each,
    comma-separated; one --records for every shape, or one a shape), in every --format."""
    shapes = args.shape.split(",")
    sizes = [int(n) for n in str(args.records).split(",")]
    if len(sizes) == 1:
        sizes *= len(shapes)
    unknown = sorted(set(shapes) - set(SHAPES))
    if unknown or len(sizes) != len(shapes):
        sys.exit(f"--shape {args.shape} --records {args.records}: shapes {sorted(SHAPES)}, "
                 "one --records or one a shape")  # fmt: skip
    formats = args.format.split(",")
    if set(formats) - set(SUFFIX):
        sys.exit(f"--format {args.format}: of {sorted(SUFFIX)}")
    return [(shape, n, fmt) for shape, n in zip(shapes, sizes, strict=True) for fmt in formats]


def _shape_digest(out: Path, root: Path) -> str:
    """The digest of a --shape report: of its text with the fleet's folder name replaced
    (the report names its folder), the same for every fleet of one shape and size."""
    text = out.read_bytes().replace(str(root).encode(), b"ROOT")
    return hashlib.sha256(text).hexdigest()[:16]


def _shape_figures(
    fleet: tuple[str, int, str],
    a: list[float],
    b: list[float],
    c: list[float],
    digests: set[str],
) -> None:
    """One --shape fleet's figures: A, B and its ratio to A, with --baseline C and B / C
    round by round, and the output's digests (B's and C's: one)."""
    name = "/".join(map(str, fleet))
    print(f"--- {fleet[0]}, {fleet[1]} records, report --{fleet[2]}")
    print(f"{'A json.loads of every line':32s}{_spread(a)}")
    _ratios(f"B mxbench report --{fleet[2]}", b, a, " (goal <= 4)", (f"A {name}", f"B {name}"))
    if c:
        _ratios("C the same, --baseline code", c, a, "", (f"A {name}", f"C {name}"))
        change = [y / x for x, y in zip(c, b, strict=True)]
        print(f"B / C, round by round: median {statistics.median(change):.3f} "
              f"(min {min(change):.3f}, max {max(change):.3f}); B faster in "
              f"{sum(r < 1 for r in change)} of {len(change)}")  # fmt: skip
    print(f"output sha256: {sorted(digests)}")


def run_shape(args: argparse.Namespace) -> None:
    """--shape: fleets of committed records, each one's A and B alternated, every fleet in
    each round (side by side: drift on a shared machine hits them all), in this process (or
    in fresh ones, --fresh)."""
    from mxbench.report import fanout

    fanout.prepare()
    fleets = _fleets(args)
    if args.baseline and not args.fresh:
        sys.exit("--shape --baseline: with --fresh (the baseline's code runs in its processes)")
    with tempfile.TemporaryDirectory() as tmp:
        roots: dict[tuple[str, int], Path] = {}
        for shape, n, _ in fleets:
            if (shape, n) in roots:
                continue
            root = roots[shape, n] = Path(tmp) / f"{shape}-{n}"
            root.mkdir()
            copies = write_shape(root, shape, n)
            files = sorted(root.glob("*.jsonl"))
            size = sum(f.stat().st_size for f in files) / 2**20
            print(f"shape {shape}: {n} records, {copies} copies of "
                  f"{len(shape_files(shape))} committed files, {len(files)} files, "
                  f"{size:.1f} MiB of JSONL")  # fmt: skip
            subprocess.run([sys.executable, "-c", _STAGES, str(root)], check=True)
        print(f"report --format {args.format}, "
              f"{'fresh processes' if args.fresh else 'in this process'}, {args.repeats} "
              f"rounds, each fleet's A then B in every round")  # fmt: skip
        if args.fresh:
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "runner")],
                           check=True)  # fmt: skip
            if args.baseline:
                subprocess.run([sys.executable, "-m", "compileall", "-q", args.baseline],
                               check=True)  # fmt: skip
        else:
            for shape, n, fmt in fleets:  # imports and caches, untimed
                _loads_here(roots[shape, n])
                _report_here(roots[shape, n], fmt)
        a: dict[tuple[str, int, str], list[float]] = {f: [] for f in fleets}
        b: dict[tuple[str, int, str], list[float]] = {f: [] for f in fleets}
        c: dict[tuple[str, int, str], list[float]] = {f: [] for f in fleets}
        digests: dict[tuple[str, int, str], set[str]] = {f: set() for f in fleets}
        old = {**os.environ, "PYTHONPATH": args.baseline} if args.baseline else None
        for _ in range(args.repeats):
            for fleet in fleets:
                root, fmt = roots[fleet[:2]], fleet[2]
                out = root / f"report{SUFFIX[fmt]}"
                name = "/".join(map(str, fleet))
                if args.fresh:
                    cmd = [sys.executable, "-m", "mxbench", "report", "--results", str(root),
                           f"--{fmt}", "--output", str(out)]  # fmt: skip
                    a[fleet].append(_time([sys.executable, "-c", _JSON_LOADS, str(root)],
                                          name=f"A {name}"))  # fmt: skip
                    b[fleet].append(_time(cmd, name=f"B {name}"))
                    digests[fleet].add(_shape_digest(out, root))
                    if old is not None:
                        c[fleet].append(_time(cmd, old, name=f"C {name}"))
                        digests[fleet].add(_shape_digest(out, root))
                else:
                    a[fleet].append(_timed_here(lambda r=root: _loads_here(r), f"A {name}"))
                    b[fleet].append(_timed_here(lambda r=root, f=fmt: _report_here(r, f),
                                                f"B {name}"))  # fmt: skip
                    digests[fleet].add(_shape_digest(out, root))
        for fleet in fleets:
            _shape_figures(fleet, a[fleet], b[fleet], c[fleet], digests[fleet])
        print(f"load average {os.getloadavg()[0]:.1f}")
        if any(len(d) != 1 for d in digests.values()):
            sys.exit("a report's output differs between runs (or from the --baseline code's)")
        if args.profile:
            for shape, n, fmt in fleets:
                print(f"=== {shape}, {n} records, report --{fmt}")
                _profile(roots[shape, n], fmt)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", default="100000",
                    help="records (--shape: one, or one a shape, comma-separated)")  # fmt: skip
    ap.add_argument("--attempts", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5, help="runs of each, alternating")
    ap.add_argument("--one-file", action="store_true", help="the whole fleet in one JSONL file")
    ap.add_argument("--steps", type=int, default=50,
                    help="raw step samples and losses per record (0: none, as before)")  # fmt: skip
    minimal_help = "contract-minimum records, 10 a table (100,000: 10,000 tables)"
    ap.add_argument("--minimal", action="store_true", help=minimal_help)
    ap.add_argument("--baseline", help="runner/ of an older checkout: its report timed too")
    ap.add_argument("--shape", help=f"fleets of committed records: {', '.join(SHAPES)} "
                    "(comma-separated: side by side, round by round)")  # fmt: skip
    ap.add_argument("--format", default="markdown",
                    help=f"with --shape: the report's formats, of {', '.join(SUFFIX)} "
                    "(comma-separated)")  # fmt: skip
    ap.add_argument("--fresh", action="store_true", help="with --shape: in fresh processes")
    ap.add_argument("--profile", action="store_true",
                    help="with --shape: one more report under cProfile, its top costs")  # fmt: skip
    args = ap.parse_args()
    if args.shape:
        run_shape(args)
        return
    args.records = int(args.records)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.minimal:
            hosts = write_minimal(root, args.records)
            what = "minimal records, 10 a table, 2 tables a host"
        else:
            hosts = write_fleet(root, args.records, args.attempts, args.one_file, args.steps)
            what = f"{args.attempts} attempt(s) per cell, {args.steps} samples + losses each"
        size = sum(f.stat().st_size for f in root.iterdir()) / 2**20
        layout = "one file, host by host" if args.one_file else "one file per host"
        print(f"{args.records} records, {hosts} hosts, {what}, {size:.0f} MiB of JSONL, {layout}")

        # Bytecode as an installed package has it (pip compiles on install): an editable
        # checkout under PYTHONDONTWRITEBYTECODE (set on this machine) recompiled about 40
        # modules in every timed run, 0.12 s of each
        for code in [Path(__file__).resolve().parents[1] / "runner", args.baseline]:
            if code:
                subprocess.run([sys.executable, "-m", "compileall", "-q", str(code)], check=True)
        subprocess.run([sys.executable, "-c", _STAGES, str(root)], check=True)

        loads = [sys.executable, "-c", _JSON_LOADS, str(root)]
        out = root / "report.md"
        report = [sys.executable, "-m", "mxbench", "report", "--results", str(root),
                  "--markdown", "--output", str(out)]  # fmt: skip
        old = {**os.environ, "PYTHONPATH": args.baseline} if args.baseline else None
        a: list[float] = []
        b: list[float] = []
        c: list[float] = []
        digests: dict[str, set[str]] = {"B": set(), "C": set()}
        for _ in range(args.repeats):  # alternate, so drift on a shared machine hits all
            a.append(_time(loads, name="A"))
            b.append(_time(report, name="B"))
            digests["B"].add(_digest(out))
            if old is not None:
                c.append(_time(report, old, name="C"))
                digests["C"].add(_digest(out))
        goal = " (goal <= 4)" if args.minimal else " (goal <= 2)"
        print(f"{'A json.loads of every line':32s}{_spread(a)}")
        _ratios("B mxbench report --markdown", b, a, goal)
        _memory("B", report, None)
        if old is not None:
            _ratios("C the same, --baseline code", c, a)
            _memory("C", report, old)
            # each round's B against its own C: the change, with the machine's drift between
            # rounds taken out
            change = [y / x for x, y in zip(c, b, strict=True)]
            print(f"B / C, round by round: median {statistics.median(change):.3f} "
                  f"(min {min(change):.3f}, max {max(change):.3f}); B faster in "
                  f"{sum(r < 1 for r in change)} of {len(change)}")  # fmt: skip
        print("output sha256: " + "; ".join(f"{k} {sorted(v)}" for k, v in digests.items() if v))
        if len(digests["B"] | digests["C"]) != 1:
            sys.exit("the report's output differs between runs or from the baseline's")
        print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
