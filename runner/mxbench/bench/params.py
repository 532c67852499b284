"""The arguments of one cell, validated before anything heavy is imported."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mxbench.errors import UsageError

MODELS = ("blog-cnn",)
POLICIES = ("float32", "mixed_float16", "mixed_bfloat16", "float16")
JIT_CHOICES = ("auto", "on", "off")
# Same rule as mxbench.matrix.MIN_IMAGE_SIZE (kept equal by a test; not imported so that the
# bench does not need pydantic): three stride-2 convolutions leave a 2x2 map at 16 px.
MIN_IMAGE_SIZE = 16
SYNTHETIC = "synthetic"


@dataclass(frozen=True)
class BenchParams:
    model: str = "blog-cnn"
    policy: str = "float32"
    batch_size: int = 32
    image_size: int = 256
    data: str = SYNTHETIC
    warmup_steps: int = 5
    steps: int = 50
    jit_compile: str = "auto"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def synthetic(self) -> bool:
        return self.data == SYNTHETIC


def _choice(option: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UsageError(f"{option} {value!r}: expected one of {', '.join(choices)}")


def _at_least(option: str, value: int, low: int, why: str = "") -> None:
    if value < low:
        raise UsageError(f"{option} {value}: must be at least {low}{why}")


def validate(p: BenchParams) -> BenchParams:
    """``p`` if it describes a cell that can be measured; else UsageError (exit 2)."""
    _choice("--model", p.model, MODELS)
    _choice("--policy", p.policy, POLICIES)
    _choice("--jit-compile", p.jit_compile, JIT_CHOICES)
    _at_least("--batch-size", p.batch_size, 1)
    _at_least("--steps", p.steps, 1)
    _at_least("--warmup-steps", p.warmup_steps, 0)
    _at_least(
        "--image-size", p.image_size, MIN_IMAGE_SIZE, " (three stride-2 convolutions need it)"
    )
    if not p.synthetic:
        train = Path(p.data) / "train"
        if not Path(p.data).is_dir():
            raise UsageError(f"--data {p.data!r}: no such directory (or use 'synthetic')")
        if not train.is_dir():
            raise UsageError(f"--data {p.data!r}: no train/ folder (Imagenette layout expected)")
        from mxbench.bench.data import list_images
        from mxbench.bench.model import NUM_CLASSES

        classes = list_images(p.data)[2]
        if len(classes) > NUM_CLASSES:
            raise UsageError(
                f"--data {p.data!r}: {len(classes)} class folders, the model has {NUM_CLASSES}"
            )
    return p
