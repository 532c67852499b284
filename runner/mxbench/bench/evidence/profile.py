"""The profiled window: a few more training steps under the backend's own profiler, after
the timed window (never inside it), summarised into the record's :class:`Profile`.

- TensorFlow: ``tf.profiler.experimental`` writes an XSpace (``*.xplane.pb``); its host
  plane holds one event per TF op (``scope/name:Conv2D``) on the executor's threads, a GPU
  plane one per kernel on each stream. Read with the ``xplane_pb2`` TensorFlow ships.
- JAX: ``jax.profiler.trace`` writes the same XSpace, with XLA's HLO instructions and
  fusions on the CPU runtime's threads (or kernels on GPU streams); read with
  ``jax.profiler.ProfileData`` (jaxlib), no TensorFlow needed.
- PyTorch: ``torch.profiler`` over the same steps; each ATen operator with its callers
  (``aten::copy_`` under ``aten::_to_copy`` is a cast), and CUDA kernels on a GPU; on a CPU
  oneDNN's verbose log is switched on for the window too (:mod:`mxbench.bench.evidence.onednn`).

Every host trace is read the same way: events nested per thread, each operation counted by
its own time, the wrappers around them (step functions, executors, Python frames, autograd
nodes) never operations (:func:`mxbench.bench.evidence.profile_ops.exclusive`); the
operations become categories (:mod:`mxbench.bench.evidence.profile_ops`). What the window costs (its
steps, the profiler's start and stop, reading the trace) is recorded as ``cost_s``. The raw
trace is deleted unless ``MXBENCH_PROFILE_DIR`` names a directory to keep it in.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from mxbench.bench.evidence import onednn
from mxbench.bench.evidence.profile_ops import Event, Op, exclusive, summarize
from mxbench.matrix.params import Params
from mxbench.records.record import OneDnnEvidence, Profile, Record, StepStats, TopOp

STEPS = 3  # profiled steps (after one unprofiled): a steady picture, at little cost
IN_FIT = ("tensorflow",)  # backends whose paired arms' profiled steps go on in their own fit
WINDOW_S = 0.5  # fewer where a step is slow: about this much of profiled steps, at least one


def steps_for(timed: StepStats | None) -> int:
    """How many steps to profile: :data:`STEPS`, fewer where the ``timed`` steps are slow (about
    :data:`WINDOW_S` of them, at least one: a 1.8 s or 0.45 s emulated bfloat16 step once)."""
    median = timed.median if timed is not None else None
    if median is None or not median > 0:
        return STEPS
    return max(1, min(STEPS, round(WINDOW_S * 1000 / median)))


LEAD_S = 0.3  # a timed step at least this long: no unprofiled step before the profiled ones


def lead_for(timed: StepStats | None) -> int:
    """Unprofiled steps first: one, paying a new ``fit`` call's setup (milliseconds), unless
    the ``timed`` steps take :data:`LEAD_S` or more (repeating a 1.8 s step of emulated
    bfloat16 would cost more than the setup it keeps out of the profile)."""
    median = timed.median if timed is not None else None
    return 0 if median is not None and median >= LEAD_S * 1000 else 1


KEEP_ENV = "MXBENCH_PROFILE_DIR"  # keep the raw trace under this directory
VERBOSE_ENV = "ONEDNN_VERBOSE"


def around(p: Params, rec: Record, measure: Callable[[], None]) -> None:
    """Run ``measure`` (the whole cell); with the profile on, TensorFlow's oneDNN creation
    log is collected meanwhile and its evidence added to the profile ``measure`` made."""
    if p.profile != "on":
        measure()
        return
    prepare(p.backend)
    with whole_run(p.backend, True) as lines:
        measure()
    add_log(rec.profile, lines, p.backend)


# Written to the captured stdout where a serving cell's gate begins: what oneDNN logs after
# it is the float32 reference model's kernels, not the cell's (add_log reads up to it).
LOG_END = "mxbench: the cell's own kernels end here"
# Written to the captured stdout where an arm of a paired process begins its turn (TURN and
# the arm's index) and ends it (TURN and "-"): what oneDNN logs between is that arm's.
TURN = "mxbench: the turn of arm "


def end_log() -> None:
    """Mark the end of the cell's own kernels in TensorFlow's oneDNN log (C's buffers
    flushed first, so that the mark follows every line before it)."""
    from mxbench.bench.process.stdio import flush

    flush()
    os.write(1, (LOG_END + "\n").encode())


def mark_turn(arm: int | None) -> None:
    """Mark in TensorFlow's oneDNN log where arm ``arm``'s turn begins (None: where the turn
    ends). oneDNN flushes every line it prints (``printf`` then ``fflush(stdout)``, in its
    ``verbose_printf_impl``), so a mark written straight to the descriptor falls between its
    lines in the order they happened."""
    os.write(1, f"{TURN}{'-' if arm is None else arm}\n".encode())


def turn_marks(backend: str, enabled: bool) -> Callable[[int | None], None]:
    """:func:`mark_turn` where :func:`whole_run` collects the log (TensorFlow, the profile
    on), else a function that marks nothing (a mark would go to the bench's own output)."""
    return mark_turn if enabled and backend == "tensorflow" else _no_mark


def _no_mark(arm: int | None) -> None:
    return None


def turns(lines: list[str]) -> tuple[dict[int, list[str]], list[str]]:
    """A log marked by :func:`mark_turn`: its lines by the arm in whose turn they were
    logged, and the lines logged in no arm's turn (before the first, between turns, after
    the last: building the models, the fits' starts and ends)."""
    by_arm: dict[int, list[str]] = {}
    outside: list[str] = []
    current: list[str] = outside
    for line in lines:
        if line.startswith(TURN):
            arm = line[len(TURN) :].strip()
            current = by_arm.setdefault(int(arm), []) if arm.isdigit() else outside
        else:
            current.append(line)
    return by_arm, outside


def prepare(backend: str) -> None:
    """Before the framework is imported: TensorFlow's oneDNN can only log primitive
    creation if asked at start (no execution is logged: see :mod:`onednn`)."""
    if backend == "tensorflow" and VERBOSE_ENV not in os.environ:
        os.environ[VERBOSE_ENV] = "profile_create"


@contextlib.contextmanager
def whole_run(backend: str, enabled: bool) -> Iterator[list[str]]:
    """Around the whole measurement of a TensorFlow cell: collect what oneDNN logs on
    stdout (the creation lines; everything else is passed on to stderr at the end)."""
    if not enabled or backend != "tensorflow":
        yield []
        return
    lines: list[str] = []
    try:
        with onednn.captured_stdout() as lines:
            yield lines
    finally:  # what others printed meanwhile goes where the bench sends stdout: stderr
        rest = [
            x for x in lines if "_verbose," not in x and x != LOG_END and not x.startswith(TURN)
        ]
        if rest:
            sys.stderr.write("\n".join(rest) + "\n")


def add_log(
    prof: Profile | None, lines: list[str], backend: str, arms: Collection[int] | None = None
) -> None:
    """The oneDNN evidence of a log collected around the whole run (TensorFlow): what it
    names, or where it names no convolution or matmul, what ran them instead. ``arms``: in a
    paired process (a log marked by :func:`mark_turn`), the arms whose turns are this
    record's: its own and those of the same policy (the same model: a primitive one of them
    created, the others may take from a cache without a line of their own); what was logged
    in no arm's turn is left out, and counted (``left_out``)."""
    if backend != "tensorflow" or prof is None or prof.device != "cpu" or prof.onednn is not None:
        return
    if LOG_END in lines:
        lines = lines[: lines.index(LOG_END)]
    own, left_out = lines, None
    if arms is not None:
        by_arm, outside = turns(lines)
        own = [x for arm in sorted(arms) for x in by_arm.get(arm, [])]
        left_out = sum(p.kind in onednn.GEMM_KINDS for p in onednn.parse(outside))
    prof.onednn = cpu_kernels(backend, own, prof, isa=onednn.isa(lines))
    if prof.onednn is not None:
        prof.onednn.scope = "process" if arms is None else "turns"
        prof.onednn.left_out = left_out


def run(
    backend: str,
    model: Any,
    ds: Any,
    *,
    gpu: bool,
    steps: int = STEPS,
    calls: Callable[[], Any] | None = None,
    lead: int = 1,
    window: Window | None = None,
) -> Profile:
    """Profile ``steps`` training steps of ``model`` on ``ds`` (after ``lead`` unprofiled
    ones: :func:`lead_for`), or with ``calls`` (a serving cell's inference call) ``steps``
    of those calls, or the ``steps`` that ``window`` runs given the profiler's start and stop
    (a paired arm's fit going on: :meth:`mxbench.bench.process.windows.Outcome.tail`); never
    raises (a failure is the profile's ``error``)."""
    t0 = time.perf_counter()
    keep = os.environ.get(KEEP_ENV)
    trace_dir = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="mxbench-profile-"))
    optimizer = str(getattr(getattr(model, "optimizer", None), "name", "") or "") or None
    prof = Profile(tool=_TOOLS[backend], steps=steps, device="gpu" if gpu else "cpu")
    try:
        trace_dir.mkdir(parents=True, exist_ok=True)
        collect = _COLLECTORS[backend]
        if window is None:
            fit = partial(_fit, model, ds, steps, lead=lead)
            window = fit if calls is None else partial(_calls, calls, steps)
        ops, wall, lines = collect(window, trace_dir, gpu, model if calls is None else None, ds)
        s = summarize(ops, wall_s=wall, steps=steps, optimizer=optimizer, gpu=gpu)
        prof.step_ms = round(wall * 1000 / steps, 4)
        prof.breakdown_ms = s.breakdown_ms
        prof.busy_share = s.busy_share
        prof.ops_ms = s.ops_ms
        prof.side_by_side = s.side_by_side
        prof.top_ops = [TopOp(name=n, category=c, ms_per_step=t, calls=k) for n, c, t, k in s.top]
        prof.tensor_core_share = s.tensor_core_share
        prof.cast_share = s.cast_share
        if not gpu and backend == "torch":  # TensorFlow's: its whole run's log (add_log)
            dtype = getattr(model, "compute_dtype", None)
            prof.onednn = cpu_kernels(backend, lines, prof, dtype, isa=_process_isa(lines))
            if prof.onednn is not None:  # this window's own executions, in any design
                prof.onednn.scope = "window"
        prof.trace = str(trace_dir) if keep else None
    except Exception as exc:  # the timed figures stand without it
        prof.error = f"{type(exc).__name__}: {exc}"[:500]
        print(f"mxbench bench: profiled window failed: {prof.error}", file=sys.stderr)
    finally:
        if not keep:
            shutil.rmtree(trace_dir, ignore_errors=True)
    prof.cost_s = round(time.perf_counter() - t0, 3)
    return prof


_ONEDNN_INFO: dict[str, str] = {}  # oneDNN's info lines, once per process: what they said


def _process_isa(lines: list[str]) -> str | None:
    """oneDNN's instruction set, from ``lines`` or, where they have no info line, from an
    earlier log of this process: oneDNN prints its info lines once per process, with its
    first logged primitive (a paired process's second arm's window has none of its own)."""
    found = onednn.isa(lines)
    if found:
        _ONEDNN_INFO["isa"] = found
    return found or _ONEDNN_INFO.get("isa")


def cpu_kernels(
    backend: str,
    lines: list[str],
    prof: Profile,
    dtype: str | None = None,
    isa: str | None = None,
) -> OneDnnEvidence | None:
    """What ran a CPU cell's convolutions and matmuls (TensorFlow, PyTorch): what oneDNN's
    log ``lines`` name, or where they name none, the backend's own kernels (the profiled
    window's busiest convolutions/matmuls, ``prof.top_ops``) and why oneDNN did not run
    them; not known (``ran`` null) where oneDNN's log was off. ``dtype``: the compute type;
    ``isa``: oneDNN's instruction set where ``lines`` are part of a log (its info line is
    printed once per process), else read from ``lines``."""
    found = onednn.evidence(onednn.parse(lines))
    isa = isa or onednn.isa(lines)
    if found is not None:
        return _evidence(found, isa)
    ran, why = _tf_without_onednn() if backend == "tensorflow" else _torch_without_onednn(dtype)
    return OneDnnEvidence(
        ran=ran,
        path=None if ran is None else "eigen" if backend == "tensorflow" else "aten",
        why=why,
        isa=isa,
        kernels=[t.name for t in prof.top_ops if t.category == "conv_matmul" and t.name][:8],
    )


def _tf_without_onednn() -> tuple[bool | None, str]:
    """Why TensorFlow's oneDNN log names no convolution or matmul: whether oneDNN ran
    them (False: TensorFlow's own kernels did; None: not known), and why."""
    setting = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    try:
        from tensorflow.python.util import _pywrap_util_port

        on: bool | None = bool(_pywrap_util_port.IsMklEnabled())
    except Exception:  # another build: TensorFlow does not say
        on = None
    if on is not True and setting is not None and setting.strip().lower() in ("0", "false"):
        return False, f"TF_ENABLE_ONEDNN_OPTS={setting}: TensorFlow's oneDNN operations were off"
    if on is None:
        return None, "this TensorFlow does not say whether its oneDNN operations were on"
    if on is False and setting is None:
        return False, (
            "TensorFlow's default on this CPU: on x86 Linux it turns its oneDNN operations "
            "on only where the CPU has AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX "
            "(TF_ENABLE_ONEDNN_OPTS=1 turns them on)"
        )
    if on is False:
        return False, "this TensorFlow build has no oneDNN operations"
    verbose = os.environ.get(VERBOSE_ENV, "")
    if not onednn.logs_primitives(verbose):
        return None, f"{VERBOSE_ENV}={verbose}: oneDNN's log was off; what ran is not known"
    return False, (
        "TensorFlow's oneDNN operations were on, but oneDNN created no convolution or "
        "matmul: TensorFlow ran them on its own kernels"
    )


def _torch_without_onednn(dtype: str | None) -> tuple[bool | None, str]:
    """Why oneDNN's log of PyTorch's profiled window names no convolution or matmul."""
    import torch

    mkldnn = torch.backends.mkldnn
    if not mkldnn.is_available():
        return False, "this PyTorch was built without oneDNN (torch.backends.mkldnn)"
    if not mkldnn.enabled:
        return False, "torch.backends.mkldnn.enabled was off"
    check = {"bfloat16": "_is_mkldnn_bf16_supported", "float16": "_is_mkldnn_fp16_supported"}
    name = check.get(str(dtype))
    try:
        supported = getattr(torch.ops.mkldnn, name)() if name else True
    except Exception:  # another PyTorch: it does not say
        supported = True
    if not supported:
        return False, (
            f"PyTorch has no oneDNN {dtype} path on this CPU as oneDNN sees it "
            f"(torch.ops.mkldnn.{name}() is false: oneDNN's instruction set "
            f"is below what {dtype} needs there, or ONEDNN_MAX_CPU_ISA caps it): its own "
            f"kernels ran the {dtype} convolutions and matmuls"
        )
    return False, (
        "oneDNN's log of the profiled window names no convolution or matmul: PyTorch ran "
        "them on its own kernels"
    )


def _evidence(found: onednn.Evidence, isa: str | None) -> OneDnnEvidence:
    return OneDnnEvidence(
        ran=True,
        path="onednn",
        isa=isa,
        weight=found.weight,
        gemm_isas=found.gemm_isas,
        native16_share=found.native16_share,
        sixteen_bit_share=found.sixteen_bit_share,
        reorder_ms=found.reorder_ms,
        gemm_ms=found.gemm_ms,
        primitives=found.primitives,
        kernels=found.examples,
        ref_passes=found.ref_passes,
    )


def _fit(model: Any, ds: Any, steps: int, start: Callable[[], None], stop: Callable[[], None],
         lead: int = 1) -> float:  # fmt: skip
    """``lead`` + ``steps`` training steps, the profiler on after the ``lead`` ones (the first
    of a new ``fit`` call pays its setup: a new iterator, callbacks); the profiled seconds."""
    import keras

    marks: dict[str, float] = {}

    class Window(keras.callbacks.Callback):  # type: ignore[misc]  # keras is untyped
        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            marks["calls"] = marks.get("calls", 0) + 1  # batch numbers step by steps_per_execution
            if marks["calls"] == lead + 1:
                start()
                marks["start"] = time.perf_counter()

        def on_train_end(self, logs: Any = None) -> None:
            marks["end"] = time.perf_counter()

    try:
        model.fit(ds, epochs=1, steps_per_epoch=steps + lead, verbose=0, shuffle=False,
                  callbacks=[Window()])  # fmt: skip
    finally:
        if "start" in marks:
            stop()
    return marks["end"] - marks["start"]


def _calls(call: Callable[[], Any], steps: int, start: Callable[[], None],
           stop: Callable[[], None]) -> float:  # fmt: skip
    """``steps`` + 1 inference calls, the profiler on from the second; the profiled
    seconds."""
    call()
    start()
    try:
        t0 = time.perf_counter()
        for _ in range(steps):
            call()
        return time.perf_counter() - t0
    finally:
        stop()


Collected = tuple[list[Op], float, list[str]]  # operations, wall seconds, oneDNN log lines
# the profiled work: given the profiler's start and stop, runs it; its seconds (_fit, _calls)
Window = Callable[[Callable[[], None], Callable[[], None]], float]


def _tensorflow(
    window: Window, trace_dir: Path, gpu: bool, model: Any = None, ds: Any = None
) -> Collected:
    import tensorflow as tf

    experimental = tf.profiler.experimental
    wall = window(lambda: experimental.start(str(trace_dir)), experimental.stop)
    return _xspace_ops(tf_planes(_xplane(trace_dir)), gpu), wall, []


Planes = list[tuple[str, list[Any]]]  # (plane, [(line, base ps, [(event, offset ps, ps)])])


def tf_planes(path: Path) -> Planes:
    """An XSpace's planes, read with the protobuf module TensorFlow ships."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    planes = []
    for plane in space.planes:
        meta = {k: v.name for k, v in plane.event_metadata.items()}
        lines = [
            (line.name, line.timestamp_ns * 1000,
             [(meta.get(e.metadata_id, ""), e.offset_ps, e.duration_ps) for e in line.events])
            for line in plane.lines
        ]  # fmt: skip
        planes.append((plane.name, lines))
    return planes


def _jax(
    window: Window, trace_dir: Path, gpu: bool, model: Any = None, ds: Any = None
) -> Collected:
    """``model`` and ``ds``: a training window's, whose instructions are then named from the
    compiled training step: library fusions after what they compute, every instruction with
    the JAX operation it came from (the optimizer's scope); a serving window's stay as the
    profiler names them."""
    import jax

    profiler = jax.profiler
    wall = window(lambda: profiler.start_trace(str(trace_dir)), profiler.stop_trace)
    ops = _xspace_ops(jax_planes(_xplane(trace_dir)), gpu)
    if model is not None and not gpu:
        ops = _name_from_hlo(ops, model, ds)
    return ops, wall, []


# XLA:CPU hands convolutions, dots and reductions to XNNPACK / YNNPACK as fusions named
# ``ynn_fusion.N``: the name does not say which (ResNet-50's convolutions are most of them).
_HLO_FUSION = re.compile(r"%([xy]nn_fusion(?:\.\d+)?) = [^\n]*?calls=%([\w.\-]+)([^\n]*)")
_HLO_COMPUTATION = re.compile(r"^%([\w.\-]+) \(.*?\{\n(.*?)^\}", re.MULTILINE | re.DOTALL)
_HLO_ROOT = re.compile(r"ROOT %[\w.\-]+ = .*? ([a-z][\w\-]*)\(")
_OP_NAME = re.compile(r'op_name="([^"]+)"')


def library_fusions(hlo_text: str) -> dict[str, str]:
    """Each library fusion of a compiled HLO module -> what it computes: the last part of
    the JAX operation it was made from (``conv_general_dilated``, ``reduce_sum``), or, where
    XLA kept no such name (weight gradients), the opcode of its fused computation's root
    (``convolution``, ``dot``)."""
    bodies = dict(_HLO_COMPUTATION.findall(hlo_text))
    out = {}
    for name, callee, rest in _HLO_FUSION.findall(hlo_text):
        op = _OP_NAME.search(rest)
        root = _HLO_ROOT.search(bodies.get(callee, ""))
        what = op.group(1).rsplit("/", 1)[-1] if op else root.group(1) if root else None
        if what:
            out[name] = what
    return out


def op_names(hlo_text: str) -> dict[str, str]:
    """Each instruction of a compiled HLO module -> the JAX operation it was made from, as
    its metadata names it with its scopes (``jit(train_step)/adam/add``); instructions XLA
    kept no name for are left out."""
    return dict(_HLO_OP_NAME.findall(hlo_text))


_HLO_OP_NAME = re.compile(r'^\s*(?:ROOT )?%([\w.\-]+) = [^\n]*?metadata=\{op_name="([^"]+)"', re.M)


def _name_from_hlo(ops: list[Op], model: Any, ds: Any) -> list[Op]:
    """``ops`` with each library fusion named after what it computes, as a TensorFlow op is
    (``ynn_fusion.12:conv_general_dilated``), and each instruction inside the JAX operation
    it was made from (its op name, the outermost of ``names``: Keras' optimizer names its
    update's scope, ``jit(train_step)/adam/add``, as TensorFlow's ops are named), from the
    compiled training step's HLO text: the computation Keras compiled, lowered again on one
    batch of ``ds`` (JAX's compilation cache answers it, in milliseconds). Unchanged when
    that fails."""
    import jax

    try:
        batch = ds[0] if hasattr(ds, "__getitem__") else next(iter(ds))
        state = model._get_jax_state(
            trainable_variables=True,
            non_trainable_variables=True,
            optimizer_variables=True,
            metrics_variables=True,
        )
        step = jax.jit(model.train_step, donate_argnums=0).lower(state, batch).compile()
        text = step.as_text()
        made_of, scoped = library_fusions(text), op_names(text)
    except Exception as exc:  # the names stay as the profiler gave them ("other")
        print(f"mxbench bench: XLA's instructions not named: {exc!r}", file=sys.stderr)
        return ops
    named = []
    for o in ops:
        name = o.names[0]
        first = f"{name}:{made_of[name]}" if name in made_of else name
        around = (scoped[name],) if name in scoped else ()
        named.append(dataclasses.replace(o, names=(first, *o.names[1:], *around)))
    return named


def jax_planes(path: Path) -> Planes:
    """An XSpace's planes, read with jaxlib's ``ProfileData`` (no TensorFlow needed)."""
    import jax

    data = jax.profiler.ProfileData.from_file(str(path))
    planes = []
    for plane in data.planes:
        lines = [
            (line.name, 0, [(e.name, int(e.start_ns * 1000), int(e.duration_ns * 1000))
                            for e in line.events])
            for line in plane.lines
        ]  # fmt: skip
        planes.append((plane.name, lines))
    return planes


def _xplane(trace_dir: Path) -> Path:
    found = sorted(trace_dir.rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise RuntimeError(f"the profiler wrote no trace under {trace_dir}")
    return found[-1]


def _xspace_ops(planes: Planes, gpu: bool) -> list[Op]:
    """Operations of an XSpace: kernels on a GPU's streams, else the events on the host's
    threads (tf.data's own threads left out; its ``IteratorGetNext`` kept: input waiting),
    nested per thread and counted by their own time (:func:`profile_ops.exclusive`:
    wrappers such as the step function, the executor and Python frames are none)."""
    ops, host = [], []
    for plane_name, lines in planes:
        on_gpu = plane_name.startswith("/device:GPU")
        if gpu != on_gpu or not (on_gpu or plane_name == "/host:CPU"):
            continue
        for i, (line_name, base_ps, events) in enumerate(lines):
            if on_gpu and not line_name.startswith("Stream"):
                continue  # the "XLA Ops" / "XLA Modules" summary lines repeat the kernels
            if line_name.startswith("tf_data"):
                continue
            for name, start_ps, dur_ps in events:
                if not name or dur_ps <= 0:
                    continue
                t0, dur = (base_ps + start_ps) / 1e12, dur_ps / 1e12
                if on_gpu:
                    ops.append(Op((name,), t0, dur, line_name))
                else:  # lines of one name (JAX's "python" threads) are told apart by index
                    name = "IteratorGetNext" if name.startswith("IteratorGetNextOp") else name
                    host.append(Event(name, t0, dur, f"{i}:{line_name}"))
    return ops + exclusive(host)


def _torch(
    window: Window, trace_dir: Path, gpu: bool, model: Any = None, ds: Any = None
) -> Collected:
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    prof = profile(activities=activities)
    mkldnn = torch.backends.mkldnn
    verbose = mkldnn.verbose(mkldnn.VERBOSE_ON) if not gpu else contextlib.nullcontext()

    def start() -> None:
        prof.start()
        verbose.__enter__()

    def stop() -> None:
        verbose.__exit__(None, None, None)
        prof.stop()

    with onednn.captured_stdout() as lines:
        wall = window(start, stop)
    if os.environ.get(KEEP_ENV):
        prof.export_chrome_trace(str(trace_dir / "torch-trace.json"))
    ops, host = [], []
    for e in prof.events():
        t0, dur = e.time_range.start / 1e6, (e.time_range.end - e.time_range.start) / 1e6
        if e.device_type == torch.autograd.DeviceType.CUDA:
            if gpu:
                ops.append(Op((e.name,), t0, dur, f"gpu{e.device_index}"))
        elif not gpu:  # nested per thread, by own time: autograd's nodes are wrappers
            host.append(Event(e.name, t0, dur, str(e.thread)))
    return ops + exclusive(host), wall, lines


_COLLECTORS = {"tensorflow": _tensorflow, "jax": _jax, "torch": _torch}
_TOOLS = {"tensorflow": "tf.profiler", "jax": "jax.profiler", "torch": "torch.profiler"}
