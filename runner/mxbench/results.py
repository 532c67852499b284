"""The result record (one type, defined once) and the append-only JSONL store.

A record is one attempt at one cell. :class:`Record` is the contract: the bench fills it
(params, metrics, device, cpu, software, settings, status), the engines stamp who ran it
(cell key, host, engine, image) or make one for a failure (timeout, kill, garbage), the
store writes it as one JSON line, and the report and ``--resume`` decode the same type.
``docs/record.md`` is generated from it (``python -m mxbench.results``).

Schema ``mxbench.result/1``: fields are only ever added (with defaults), so every line
written by any version of mxbench, and the transcribed ``examples/published/`` records,
decode as this type; a field a line does not have takes its default. Unknown fields (from a
newer mxbench) are ignored.

Layout on disk: ``<results>/<host>.jsonl``, one file per host (asv-style), so that
directories from many machines can be merged by copying them side by side.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from mxbench.params import Params

SCHEMA = "mxbench.result/1"
Status = Literal["ok", "oom", "error", "timeout", "unsupported"]
STATUSES: tuple[str, ...] = ("ok", "oom", "error", "timeout", "unsupported")
# A cell whose latest record has one of these is done: --resume skips it.
# An OOM is a real, final answer about that device and batch size.
FINAL_STATUSES = frozenset({"ok", "oom"})

# A measured time or rate: positive and finite (JSON has no NaN; 1e999 decodes as inf).
Positive = Annotated[float, Meta(gt=0, lt=1e15)]
Count = Annotated[int, Meta(ge=0)]


class _Part(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A sub-object: unset fields are left out of the line, and read back as their default."""


class StepStats(_Part):
    """Milliseconds per timed step (warm-up excluded)."""

    median: Positive | None = None
    p25: Positive | None = None
    p75: Positive | None = None
    mean: Positive | None = None
    min: Positive | None = None
    max: Positive | None = None
    n: Count | None = None


class Metrics(_Part):
    step_ms: StepStats | None = None
    images_per_s: Positive | None = None
    first_step_ms: float | None = None  # the first warm-up step (tracing, compilation)
    warmup_ms: float | None = None  # all warm-up steps together
    startup_s: float | None = None  # process start -> first timed step
    import_s: float | None = None  # importing the framework
    loss_first: float | None = None  # training loss at the first / last timed step
    loss_last: float | None = None
    loss_scale: float | None = None  # final dynamic loss scale (mixed_float16), else null
    peak_memory_bytes: Count | None = None
    peak_memory_kind: Literal["gpu", "rss"] | None = None
    gpu_util_pct: Annotated[float, Meta(ge=0, le=100)] | None = None  # NVML median, timed steps
    train_flops_per_image: float | None = None  # analytic, forward + backward (~3x forward)
    achieved_tflops: float | None = None


class PresentGpu(_Part):
    name: str | None = None
    compute_capability: str | None = None
    uuid: str | None = None


class Device(_Part):
    """What the timed steps ran on, as the framework used it (not just what was present)."""

    kind: Literal["gpu", "cpu"] | None = None
    name: str | None = None
    compute_capability: str | None = None  # "7.0"; null for CPUs
    memory_bytes: Count | None = None
    driver: str | None = None
    uuid: str | None = None
    used_by_tf: bool | None = None  # false: a GPU is present, the framework ran on the CPU
    present_gpus: list[PresentGpu] = []
    cc_source: Literal["nvml", "tensorflow"] | None = None
    cc_framework: str | None = None  # the framework's own CC when it disagrees with NVML


class Cpu(_Part):
    model: str | None = None
    arch: str | None = None  # platform.machine(): x86_64, aarch64, ...
    cores: Count | None = None  # usable by this process
    logical_cpus: Count | None = None
    # The ISA extensions that matter for training speed (mxbench.bench.probe.ISA_FLAGS).
    flags: list[str] = []
    # What TF's cpu_feature_guard says the binary was not compiled for; null if unknown.
    tf_not_compiled_for: list[str] | None = None


class Software(_Part):
    python: str | None = None
    backend: str | None = None  # Keras backend
    mxbench: str | None = None
    tensorflow: str | None = None
    tf_git_version: str | None = None
    keras: str | None = None
    cuda: str | None = None
    cudnn: str | None = None
    cuda_compute_capabilities: list[str] | None = None  # what the TF binary was built for
    is_cuda_build: bool | None = None


class Settings(_Part):
    """What changes the numbers besides the params."""

    policy: str | None = None
    jit_compile: bool | None = None  # whether Keras really compiled with XLA
    tf32: bool | None = None
    onednn: str | None = None  # TF_ENABLE_ONEDNN_OPTS
    xla_flags: str | None = None
    tf32_override: str | None = None  # NVIDIA_TF32_OVERRIDE
    compute_dtype: str | None = None
    variable_dtype: str | None = None
    loss_scaling: bool | None = None
    pure_float16: bool | None = None


class Image(_Part):
    name: str | None = None  # the matrix's image name (or a Slurm container image)
    id: str | None = None  # the Docker image id
    labels: dict[str, str] = {}  # io.mxbench.* provenance labels
    runtime: str | None = None  # Slurm container runtime (pyxis, apptainer)


class ModelInfo(_Part):
    name: str | None = None
    parameters: Count | None = None


class Record(msgspec.Struct, kw_only=True):
    """One attempt at one cell: the line ``results/<host>.jsonl`` gets."""

    schema: str = SCHEMA
    cell: str | None = None  # the stable cell key (stamped by the orchestrator)
    time: str | None = None  # ISO-8601, when the attempt ended
    host: str | None = None
    engine: str | None = None
    image: Image = msgspec.field(default_factory=Image)
    params: Params
    status: Status
    metrics: Metrics = msgspec.field(default_factory=Metrics)
    device: Device = msgspec.field(default_factory=Device)
    cpu: Cpu = msgspec.field(default_factory=Cpu)
    software: Software = msgspec.field(default_factory=Software)
    settings: Settings = msgspec.field(default_factory=Settings)
    model: ModelInfo | None = None
    run: dict[str, Any] = {}  # wall_s and engine details (container, Slurm job, pid)
    error: str | None = None  # the message's tail when status is not ok
    source: str | None = None  # where a record not measured by mxbench comes from

    def problem(self) -> str | None:
        """Why this record cannot stand for a cell in a table, or None when it can."""
        if self.schema != SCHEMA:
            return f"unknown schema {_short(self.schema)} (this mxbench reads {SCHEMA})"
        missing = [k for k in ("cell", "host") if not getattr(self, k)]
        if missing:
            return f"missing contract field(s): {', '.join(missing)}"
        return None

    @property
    def step(self) -> StepStats | None:
        """The step times of an ok record, when it has them."""
        step = self.metrics.step_ms
        return step if self.status == "ok" and step is not None and step.median else None


def _short(value: str, limit: int = 40) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "…")


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_record(
    *,
    params: Params,
    status: Status,
    error: str | None = None,
    cell: str | None = None,
    host: str | None = None,
    engine: str | None = None,
    image: Image | None = None,
) -> Record:
    """A record of an attempt, stamped with the current time."""
    return Record(
        cell=cell,
        time=now_iso(),
        host=host,
        engine=engine,
        image=image or Image(),
        params=params,
        status=status,
        error=error,
    )


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Record)


def encode(record: Record) -> bytes:
    """One JSON line (with its newline). Non-finite floats are written as null."""
    return _encoder.encode(record) + b"\n"


class BadRecord(ValueError):
    """A line that is not a record; ``str()`` is the reason, in one line."""


def decode(line: bytes | str) -> Record:
    """The record on one line, or :class:`BadRecord` saying why not."""
    try:
        return _decoder.decode(line)
    except msgspec.ValidationError as exc:
        raise BadRecord(_reason(str(exc))) from None
    except msgspec.DecodeError as exc:
        raise BadRecord(f"not JSON ({_reason(str(exc))})") from None


def _reason(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


_JSON_LINE = re.compile(rb"^\s*\{.*\}\s*$")


def parse_bench_output(stdout: str) -> Record | None:
    """The record a bench printed: the last stdout line that decodes as one.

    Searching from the end tolerates stray prints (a library writing to stdout) before it.
    """
    for line in reversed(stdout.encode("utf-8", "replace").splitlines()):
        if not _JSON_LINE.match(line):
            continue
        try:
            rec = decode(line)
        except BadRecord:
            continue
        if rec.schema == SCHEMA:
            return rec
    return None


def tail(text: str, lines: int = 20, chars: int = 4000) -> str:
    """The last lines of a log, for error fields: enough to see why, small enough to store."""
    out = "\n".join(text.rstrip().splitlines()[-lines:])
    return out[-chars:]


def _safe_name(host: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", host) or "host"


@dataclass(frozen=True)
class BadLine:
    path: Path
    lineno: int
    reason: str


def read_records(path: Path, bad: list[BadLine] | None = None) -> Iterator[tuple[int, Record]]:
    """(line number, record) for each record of one JSONL file, streamed line by line;
    lines that are not records are reported into ``bad`` and skipped."""
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = decode(line)
            except BadRecord as exc:
                if bad is not None:
                    bad.append(BadLine(path, lineno, str(exc)))
                continue
            yield lineno, rec


class ResultStore:
    """Append-only JSONL files under one directory, one file per host.

    Appends take an exclusive ``flock`` and write the whole line with one ``write`` on an
    ``O_APPEND`` descriptor, then fsync: two runs writing at once never interleave, and a
    crash loses at most the record being written.
    """

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def path_for(self, host: str) -> Path:
        return self.root / f"{_safe_name(host)}.jsonl"

    def append(self, record: Record) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.path_for(record.host or "unknown")
        data = encode(record)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        return path

    def files(self) -> list[Path]:
        return sorted(self.root.glob("*.jsonl")) if self.root.is_dir() else []

    def latest_by_cell(self) -> dict[str, Record]:
        """Latest record per cell key (file order is append order, so last wins)."""
        latest: dict[str, Record] = {}
        for path in self.files():
            for _, rec in read_records(path):
                if rec.cell:
                    latest[rec.cell] = rec
        return latest

    def done_cells(self) -> set[str]:
        return {k for k, r in self.latest_by_cell().items() if r.status in FINAL_STATUSES}
