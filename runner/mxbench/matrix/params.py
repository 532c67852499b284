"""The cell parameters, declared once.

:class:`Params` is the single definition of what one cell measures: each field's type,
bounds and default, and (in its :class:`Spec`) its help text, its ``mxbench bench`` flag, its
column in the plan and the CSV, and its role in a report table. Everything else derives
from it: the matrix schema (``benchmark:`` one value, ``axes:`` a list), the options of
``mxbench bench``, the cell key, the ``--dry-run`` plan, the record's ``params`` (the same
type, decoded by the report), the tables' setup and the DataFrame's columns. A new
parameter is one field here plus the code that uses it.

Light on purpose: the bench imports it inside images (msgspec only; no pydantic, no typer).
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

Policy = Literal["float32", "mixed_float16", "mixed_bfloat16", "float16"]
JitCompile = Literal["auto", "on", "off"]
Backend = Literal["tensorflow", "jax", "torch"]
Pairing = Literal["paired", "process"]
OnOff = Literal["on", "off"]
Flip = Literal["none", "horizontal", "vertical", "both"]
Scaling = Literal["weak", "strong", "independent"]
# The dtype PyTorch's processes all-reduce their gradients in (mxbench.bench.parallel.torch_workers)
AllReduce = Literal["native", "bfloat16", "float16"]
Mode = Literal["train", "infer"]
Call = Literal["direct", "compiled", "predict_on_batch", "predict"]
Quantize = Literal["none", "int8", "float8", "int4"]
WEIGHTS_NONE = "none"  # an infer cell's weights: the build's own (seeded)
WEIGHTS_TRAINED = "trained"  # the matrix's training run's final weights
POLICIES: tuple[str, ...] = typing.get_args(Policy)
JIT_CHOICES: tuple[str, ...] = typing.get_args(JitCompile)
BACKENDS: tuple[str, ...] = typing.get_args(Backend)
BASELINE = "float32"
SYNTHETIC = "synthetic"
# The smallest input any model may be given; each model may declare its own smallest
# (MIN_IMAGE_SIZE in its module: mxbench.models.facts), checked when the matrix loads.
MIN_IMAGE_SIZE = 8
# The input of a model that declares none (IMAGE_SIZE in its module), where the matrix names
# no image_size: the published experiment's.
DEFAULT_IMAGE_SIZE = 256
MAX_SEQ_LEN = 1 << 20
MAX_VOCAB = 1 << 24
# Upper bounds: far beyond any real run, low enough that a typo (an extra zero or three)
# is caught at load time instead of allocating for hours.
MAX_BATCH_SIZE = 65536
MAX_IMAGE_SIZE = 8192
MAX_STEPS = 1_000_000
MAX_DEVICES = 1024
# The largest whole number a record may hold: what every reader's 64-bit integers hold
# (the DataFrame's Int64, numpy, JSON parsers in other languages).
MAX_INT = 2**63 - 1

# Characters that end a line somewhere (a shell, a #SBATCH directive, Python's splitlines):
# never allowed in a value that reaches a command line, a script or a one-line message.
CONTROL_CHARS = "\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029"
ONE_LINE = f"\\A[^{CONTROL_CHARS}]*\\Z"  # for msgspec (Python's re; $ would allow a final \n)


@cache
def control(keep: str = "") -> re.Pattern[str]:
    """One character of :data:`CONTROL_CHARS` (what a record's text must not carry into a
    terminal, a page or a script line), except those in ``keep`` (``"\\n"``)."""
    return re.compile(f"(?![{keep}])[{CONTROL_CHARS}]" if keep else f"[{CONTROL_CHARS}]")


# loss_scale: a word, or a positive factor written as parse_loss_scale writes it.
LOSS_SCALE_WORDS = ("auto", "dynamic", "none")
LOSS_SCALE_PATTERN = r"\A(auto|dynamic|none|[0-9][0-9.e+-]*)\Z"
MAX_LOSS_SCALE = 1e30  # float32's range ends near 3.4e38: beyond this nothing is left to show


def parse_loss_scale(value: Any) -> str:
    """``auto``, ``dynamic``, ``none``, or a positive factor in one spelling (``1e9``,
    ``1000000000`` and ``1.0e9`` are all ``1e+09``): ValueError for anything else."""
    if isinstance(value, str) and value.strip().lower() in LOSS_SCALE_WORDS:
        return value.strip().lower()
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"expected {', '.join(LOSS_SCALE_WORDS)} or a factor, not {value!r}")
    try:
        factor = float(value)
    except ValueError:
        raise ValueError(
            f"{value!r}: expected {', '.join(LOSS_SCALE_WORDS)} or a positive factor (1024)"
        ) from None
    if not 0 < factor <= MAX_LOSS_SCALE:  # also NaN
        raise ValueError(f"{value!r}: a fixed loss scale must be above 0 and at most 1e30")
    return f"{factor:g}"


def loss_scale_factor(value: str) -> float | None:
    """The fixed factor of a ``loss_scale`` value, None for the words."""
    return None if value in LOSS_SCALE_WORDS else float(value)


Role = Literal["slot", "setup", "precision", "repeat"]


@dataclass(frozen=True)
class Spec:
    """How a parameter shows up beyond its type.

    ``role``: ``slot`` places a record inside a table (policy, batch size); ``setup`` chooses
    the table (a different value is a different experiment); ``precision`` changes how
    precisely a cell is measured, not what (steps); ``repeat`` tells attempts apart.
    ``search``: the matrix axis may list ``max`` (the largest value that fits).
    ``flag``: the ``mxbench bench`` option (None: not a bench option). ``column``: the
    heading in the ``--dry-run`` plan (None: not shown). ``axis``: the default list of values
    when the matrix names the parameter nowhere (the experiment's sweep), else one default.
    """

    help: str
    role: Role = "setup"
    flag: str | None = None
    column: str | None = None
    axis: tuple[Any, ...] | None = None
    key_default: bool = True
    # The axis may say ``max``: search for the largest value that fits (mxbench.matrix.search).
    search: bool = False
    # Turns what a matrix or the command line gives into the value (ValueError: refused);
    # for a parameter whose text has one spelling per value (``loss_scale: 1e9``).
    parse: Any = None


class Params(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=False):
    """What one cell measures. Defaults are the published experiment's."""

    model: Annotated[
        str,
        Meta(min_length=1, max_length=4096, pattern=ONE_LINE),
        Spec("The model: a built-in one (blog-cnn, so-cnn, resnet50, mobilenet_v2, "
             "efficientnet_b0, convnext_tiny, bert, gpt) or your own, as path/to/file.py:build "
             "or pkg.module:build (docs/models.md).", flag="--model", column="model"),
    ] = "blog-cnn"  # fmt: skip
    policy: Annotated[
        Policy,
        Spec("Keras dtype policy; float16 is pure float16 (no float32 master weights, no loss "
             "scaling).", role="slot", flag="--policy", column="policy",
             axis=("float32", "mixed_float16")),
    ] = "float32"  # fmt: skip
    batch_size: Annotated[
        int,
        Meta(ge=1, le=MAX_BATCH_SIZE),
        Spec("Images per training step.", role="slot", flag="--batch-size", column="batch",
             axis=(32, 64, 128, 256, 512), search=True),
    ] = 32  # fmt: skip
    image_size: Annotated[
        Annotated[int, Meta(ge=MIN_IMAGE_SIZE, le=MAX_IMAGE_SIZE)] | None,
        Spec("Input height in pixels (and width, unless --image-width is given); each model "
             "has its smallest. Unset: the model's own input (so-cnn's 224x336), else 256.",
             flag="--image-size", column="px"),
    ] = None  # fmt: skip
    image_width: Annotated[
        Annotated[int, Meta(ge=MIN_IMAGE_SIZE, le=MAX_IMAGE_SIZE)] | None,
        Spec("Input width in pixels when it differs from the height (the Stack Overflow "
             "question's 224x336: --image-size 224 --image-width 336).", flag="--image-width",
             column="width", key_default=False),
    ] = None  # fmt: skip
    seq_len: Annotated[
        int,
        Meta(ge=1, le=MAX_SEQ_LEN),
        Spec("Tokens per sequence (token models: bert, gpt, or yours).", flag="--seq-len",
             column="seq", key_default=False),
    ] = 128  # fmt: skip
    vocab_size: Annotated[
        int,
        Meta(ge=2, le=MAX_VOCAB),
        Spec("Vocabulary size of token models (token ids are drawn below it).",
             flag="--vocab-size", column="vocab", key_default=False),
    ] = 8192  # fmt: skip
    data: Annotated[
        str,
        Meta(min_length=1, max_length=4096, pattern=ONE_LINE),
        Spec("'synthetic', or a directory in Imagenette layout (train/<class>/*.jpg).",
             flag="--data", column="data"),
    ] = SYNTHETIC  # fmt: skip
    warmup_steps: Annotated[
        int,
        Meta(ge=0, le=MAX_STEPS),
        Spec("Untimed steps first (tracing, compilation, autotuning).", role="precision",
             flag="--warmup-steps", column="warmup"),
    ] = 5  # fmt: skip
    steps: Annotated[
        int,
        Meta(ge=1, le=MAX_STEPS),
        Spec("Timed training steps.", role="precision", flag="--steps", column="steps"),
    ] = 50
    jit_compile: Annotated[
        JitCompile,
        Spec("XLA compilation: auto (Keras decides), on or off.", flag="--jit-compile",
             column="jit"),
    ] = "auto"  # fmt: skip
    backend: Annotated[
        Backend,
        Spec("Keras 3 backend that runs the model: tensorflow, jax or torch.", flag="--backend",
             column="backend", key_default=False),
    ] = "tensorflow"  # fmt: skip
    profile: Annotated[
        OnOff,
        Spec("A few more steps after the timed ones under the backend's profiler: where the "
             "time goes (convolutions, memory-bound ops, casts, ...) and, on a CPU, which "
             "oneDNN kernels ran. Never inside the timed steps.", role="precision",
             flag="--profile", column="profile", key_default=False),
    ] = "on"  # fmt: skip
    check: Annotated[
        OnOff,
        Spec("The one-step check after the timed steps (policies other than float32): the "
             "first gradient against a float32 build's on the same batch (its first 32 "
             "examples, as few as 8 where a timed step is slow); infer cells: the gate, "
             "outputs against float32's. Never inside the timed steps, never in the peak "
             "memory; a batch-size search's trials run without it.", role="precision",
             flag="--check", column="check", key_default=False),
    ] = "on"  # fmt: skip
    loss_scale: Annotated[
        str,
        Meta(pattern=LOSS_SCALE_PATTERN),
        Spec("Loss scaling: auto (Keras' own: dynamic under mixed_float16, none otherwise), "
             "dynamic (a LossScaleOptimizer under any policy), none, or a fixed factor such "
             "as 1024 (the optimizer's loss_scale_factor: no step is skipped, an overflow "
             "trains on).", flag="--loss-scale", column="loss scale", key_default=False,
             parse=parse_loss_scale),
    ] = "auto"  # fmt: skip
    steps_per_execution: Annotated[
        int,
        Meta(ge=1, le=MAX_STEPS),
        Spec("Training steps per call into the compiled train function (Keras' "
             "steps_per_execution): above 1 the host's per-step overhead is paid once per so "
             "many steps (the host-overhead A/B). warmup_steps and steps are multiples of it.",
             flag="--steps-per-execution", column="spe", key_default=False),
    ] = 1  # fmt: skip
    flip: Annotated[
        Flip,
        Spec("Random flips of the training images of a data folder (the Stack Overflow "
             "question's ImageDataGenerator flips both ways).", flag="--flip", column="flip",
             key_default=False),
    ] = "none"  # fmt: skip
    epochs: Annotated[
        Annotated[int, Meta(ge=1, le=MAX_STEPS)] | None,
        Spec("A training run instead of a timing cell: this many epochs over the data "
             "folder's train/ split, evaluated on its val/ (or test/) split; repeat k trains "
             "from seed k, so measure.repeats is the number of seeds.", flag="--epochs",
             column="epochs", key_default=False),
    ] = None  # fmt: skip
    eval_every: Annotated[
        int,
        Meta(ge=1, le=MAX_STEPS),
        Spec("Training runs: evaluate on the validation split every this many epochs.",
             role="precision", flag="--eval-every", column="eval", key_default=False),
    ] = 1  # fmt: skip
    target: Annotated[
        Annotated[float, Meta(gt=0, le=1)] | None,
        Spec("Training runs: the validation accuracy to reach (0.9: 90%); the report gives "
             "each policy's time to it and its speedup over float32.", role="precision",
             flag="--target", column="target", key_default=False),
    ] = None  # fmt: skip
    mode: Annotated[
        Mode,
        Spec("train: time training steps; infer: time inference calls only (serving: latency "
             "percentiles, throughput, outputs against float32's; docs/serving.md).",
             flag="--mode", column="mode", key_default=False),
    ] = "train"  # fmt: skip
    call: Annotated[
        Call,
        Spec("Infer cells: how the model is called: direct (model(x, training=False) on a "
             "device-placed batch), compiled (the same through the backend's compiler: "
             "tf.function, jax.jit, torch.compile), predict_on_batch or predict (Keras' "
             "loops).",
             flag="--call", column="call", key_default=False),
    ] = "direct"  # fmt: skip
    quantize: Annotated[
        Quantize,
        Spec("Infer cells: Keras' Model.quantize applied after the build (int8, float8, "
             "int4), under the cell's policy; none: as built.", flag="--quantize",
             column="quantize",
             key_default=False),
    ] = "none"  # fmt: skip
    weights: Annotated[
        str,
        Meta(min_length=1, max_length=4096, pattern=ONE_LINE),
        Spec("Infer cells: the weights served: none (the build's seeded weights; the gate "
             "compares outputs on synthetic inputs), trained (the final weights of this "
             "matrix's training run of the same setup: epochs, data), or a Keras "
             ".weights.h5 file; with trained weights and a data folder the gate is top-1 on "
             "its validation split (docs/serving.md).", flag="--weights", column="weights",
             key_default=False),
    ] = "none"  # fmt: skip
    train_policy: Annotated[
        Policy | None,
        Spec("Infer cells with weights: trained: the policy the served weights were trained "
             "under (trained in one precision, served in another); unset: the cell's own.",
             flag="--train-policy", column="trained", key_default=False),
    ] = None  # fmt: skip
    pairing: Annotated[
        Pairing,
        Spec("How a speedup's arms are measured: paired (float32 and each policy built in one "
             "process and timed in short interleaved windows in a random balanced order, "
             "so a busy machine's drift falls on both; the default) or process (one policy "
             "per process, alternating processes). Training runs, batch-size searches and "
             "steps_per_execution > 1 always use one policy per process.", role="precision",
             flag="--pairing", column="pairing", key_default=False),
    ] = "paired"  # fmt: skip
    timed_s: Annotated[
        float,
        Meta(gt=0, le=86400),
        Spec("Paired measurement: seconds of timed windows per pass (one batch size of a "
             "process), every arm together (the windows also stop when an arm has `steps` "
             "timed steps).", role="precision",
             flag="--timed-s", column="timed s", key_default=False),
    ] = 8.0  # fmt: skip
    devices: Annotated[
        int,
        Meta(ge=1, le=MAX_DEVICES),
        Spec("Devices one cell trains on, data parallel through the backend's own mechanism "
             "(JAX: keras.distribution.DataParallel; TensorFlow: MirroredStrategy; PyTorch: one "
             "process per device, started by the bench, gradients all-reduced over gloo or "
             "NCCL). On a CPU the host is split into this many devices that share its cores "
             "(plumbing, not scaling). 1: one device, as always.", flag="--devices", column="dev",
             key_default=False),
    ] = 1  # fmt: skip
    nodes: Annotated[
        int,
        Meta(ge=1, le=MAX_DEVICES),
        Spec("Processes one cell trains in, data parallel across them (Slurm hosts: one "
             "task each, launched by srun, placed tasks_per_node to a node; JAX: "
             "jax.distributed, TensorFlow: MultiWorkerMirroredStrategy, both from Slurm's "
             "variables), each on `devices` devices (PyTorch: `devices` tasks each, one "
             "per device). 1: one process, as always.",
             flag="--nodes", column="nodes", key_default=False),
    ] = 1  # fmt: skip
    scaling: Annotated[
        Scaling,
        Spec("With devices > 1: weak holds batch_size per device (the global batch is "
             "devices x batch_size), strong holds batch_size as the global batch (each "
             "device gets batch_size / devices); independent trains one replica per device "
             "at batch_size each, with no gradient all-reduce, each timed on its own (the "
             "no-communication reference of weak scaling and a per-device health sweep; "
             "docs/scaling.md).", flag="--scaling", column="scaling", key_default=False),
    ] = "weak"  # fmt: skip
    allreduce: Annotated[
        AllReduce,
        Spec("Several devices on the torch backend (devices or nodes > 1): the dtype the gradients "
             "are all-reduced in: native (their own, float32 under the mixed policies), or "
             "bfloat16 / float16 (cast for the all-reduce and back: half the bytes between "
             "processes, rounded; float16 overflows where gradients pass 65504). JAX's and "
             "TensorFlow's mechanisms offer no choice.", flag="--allreduce",
             column="allreduce", key_default=False),
    ] = "native"  # fmt: skip
    repeat: Annotated[
        Annotated[int, Meta(ge=0, le=MAX_INT)] | None,
        Spec("Which repetition of the cell (matrix measure.repeats > 1); a training run "
             "(--epochs) trains from this seed.", role="repeat", flag="--repeat", column="rep"),
    ] = None  # fmt: skip

    @property
    def synthetic(self) -> bool:
        return self.data == SYNTHETIC

    @property
    def image_hw(self) -> tuple[int, int]:
        """Height and width of the image input, once the model's own input has filled an
        unset ``image_size`` (mxbench.models.own_input: where cells are planned and where
        the bench validates its arguments)."""
        assert self.image_size is not None, "image_size is set before the cell is measured"
        return self.image_size, self.image_width or self.image_size

    @property
    def training_run(self) -> bool:
        """A training run (``epochs``, mode train); a serving cell's ``epochs`` names the
        training run whose weights it serves (``weights: trained``)."""
        return bool(self.epochs) and self.mode == "train"

    @property
    def seed(self) -> int:
        """The seed of weights, data order and flips: a training run's repeat k uses k."""
        return (self.repeat or 0) if self.training_run else 0

    def key_fields(self) -> dict[str, Any]:
        """The fields that identify the cell (its key): every field that is set, except
        those declared ``key_default=False`` while at their default."""
        return {
            f.name: value
            for f in fields()
            if (value := getattr(self, f.name)) is not None
            and (f.spec.key_default or value != f.default)
        }

    def bench_args(self) -> list[str]:
        """``mxbench bench`` options that measure these params."""
        out: list[str] = []
        for f in fields():
            value = getattr(self, f.name)
            if f.spec.flag and value is not None:
                out += [f.spec.flag, str(value)]
        return out


@dataclass(frozen=True)
class Field:
    """One parameter: the struct field with its type, bounds, default and :class:`Spec`."""

    name: str
    type: Any  # the Python type (int, str, a Literal), without Annotated metadata
    default: Any
    spec: Spec
    ge: int | None = None
    le: int | None = None
    choices: tuple[str, ...] | None = None

    @property
    def is_float(self) -> bool:
        inner = [a for a in (self.type, *typing.get_args(self.type)) if a is not type(None)]
        return any(a is float or typing.get_args(a)[:1] == (float,) for a in inner)

    @property
    def is_int(self) -> bool:
        """An integer parameter (optional or not)."""
        inner = [a for a in (self.type, *typing.get_args(self.type)) if a is not type(None)]
        return any(a is int or typing.get_args(a)[:1] == (int,) for a in inner)

    @property
    def values(self) -> tuple[Any, ...]:
        """Values used when a matrix does not name the parameter."""
        return self.spec.axis if self.spec.axis is not None else (self.default,)


@cache
def fields() -> tuple[Field, ...]:
    """The parameters, in declaration order (the order cells are expanded in)."""
    hints = typing.get_type_hints(Params, include_extras=True)
    out = []
    for f in msgspec.structs.fields(Params):
        hint = hints[f.name]
        args = typing.get_args(hint)
        base, meta = args[0], args[1:]
        spec = next(m for m in meta if isinstance(m, Spec))
        union = typing.get_origin(base) in (typing.Union, types.UnionType)
        inner = next(a for a in typing.get_args(base) if a is not type(None)) if union else base
        # the bounds of the value, beside the Spec or on the type of an optional whole number
        # (an optional fraction such as target keeps its own message: mxbench.matrix.file)
        annotated = typing.get_origin(inner) is Annotated
        inner_meta = typing.get_args(inner)[1:] if annotated and inner.__origin__ is int else ()
        bounds = next((m for m in (*meta, *inner_meta) if isinstance(m, Meta)), None)
        choices = typing.get_args(inner) if typing.get_origin(inner) is Literal else None
        out.append(
            Field(
                name=f.name,
                type=base,
                default=f.default,
                spec=spec,
                ge=getattr(bounds, "ge", None),
                le=getattr(bounds, "le", None),
                choices=choices,
            )
        )
    return tuple(out)


@cache  # a report asks for defaults per table
def field(name: str) -> Field:
    return next(f for f in fields() if f.name == name)


@cache
def swept() -> tuple[Field, ...]:
    """The parameters a matrix may set under ``benchmark`` / ``measure`` or sweep under
    ``axes`` (every one but the repeat, which the run numbers)."""
    return tuple(f for f in fields() if f.spec.role != "repeat")


def names(*roles: Role) -> tuple[str, ...]:
    """Names of the parameters with these roles (all when none given)."""
    return tuple(f.name for f in fields() if not roles or f.spec.role in roles)
