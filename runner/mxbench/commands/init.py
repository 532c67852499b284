"""``mxbench init``: a commented ``matrix.yaml`` for this machine, to edit."""

from __future__ import annotations

import importlib.util
import platform
import shutil
from pathlib import Path

import typer

from mxbench.errors import UsageError


def _cpu() -> tuple[str, bool]:
    """The CPU's name and whether it has bfloat16 instructions (AVX512_BF16 / AMX)."""
    name, bf16 = platform.processor() or platform.machine(), False
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return name, bf16
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            name = value.strip()
        if key.strip() == "flags":
            flags = set(value.split())
            bf16 = bool({"avx512_bf16", "amx_bf16"} & flags)
    return name, bf16


def _line(text: str, comment: str = "") -> str:
    return f"{text:<23} # {comment}".rstrip() if comment else text


def matrix_text() -> str:
    """The matrix ``mxbench init`` writes: this machine as a local host, its GPU if
    ``nvidia-smi`` is there, the first Keras backend installed."""
    cpu, bf16 = _cpu()
    gpu = shutil.which("nvidia-smi") is not None
    installed = [b for b in ("tensorflow", "jax", "torch") if importlib.util.find_spec(b)]
    if gpu:
        policies, sizes, image = "float32, mixed_float16, mixed_bfloat16", "64, 128, 256", 224
        why = "a GPU (nvidia-smi found): float16 and bfloat16 on its Tensor Cores"
    else:
        policies, sizes, image = "float32, mixed_bfloat16", "8, 32", 64
        why = f"{cpu}: " + (
            "bfloat16 instructions (AVX512_BF16 / AMX)"
            if bf16
            else "no bfloat16 instructions (AVX512_BF16 / AMX): mixed may well be slower"
        )
    lines = [
        "# A matrix for this machine, written by `mxbench init`; every key: docs/matrix.md.",
        "#   mxbench run --matrix matrix.yaml --dry-run   # what would run",
        "#   mxbench run --matrix matrix.yaml             # then: mxbench report --markdown",
        f"# {why}",
        "version: 1",
        _line("measure: default", "how to measure: quick | default | rigorous, or the knobs:"),
        "# measure: {steps: 50, warmup_steps: 5, timed_s: 8, repeats: auto}",
        _line("benchmark:", "what every cell measures (one value each)"),
        _line("  model: blog-cnn", "a zoo model (resnet50, gpt, ...) or path/to/file.py:build"),
        _line(
            f"  backend: {installed[0] if installed else 'tensorflow'}",
            f"tensorflow | jax | torch (installed: {', '.join(installed) or 'none'})",
        ),
        _line(f"  image_size: {image}", "input height and width in pixels"),
        _line("  data: synthetic", "or an image folder (`mxbench data digits DIR`)"),
        _line("  timeout_s: 1800", "per cell"),
        _line("axes:", "what varies: a cell per combination"),
        f"  policy: [{policies}]",
        f"  batch_size: [{sizes}]",
        "  # model: [blog-cnn, resnet50]   # any benchmark key may be a list here instead",
        "hosts:",
        "  - name: local",
        _line("    engine: local", "this machine, a fresh process per cell"),
        "  # - name: gpu-box               # another machine's Docker daemon (docs/docker.md)",
        "  #   engine: docker",
        "  #   docker_host: ssh://me@gpu-box",
        "  #   gpus: all",
        "  #   images: [gpu]",
        "# images:",
        "#   gpu: {dockerfile: Dockerfile, target: gpu}",
    ]
    return "\n".join(lines) + "\n"


def init(
    path: Path = typer.Argument(
        Path("matrix.yaml"), help="Where to write it (a folder: FOLDER/matrix.yaml)."
    ),
    force: bool = typer.Option(False, "--force", "-f", help="Replace an existing file."),
) -> None:
    """Write a commented matrix.yaml for this machine (its CPU, or its GPU) to edit.

    It loads as it is: `mxbench run --matrix matrix.yaml`. Exit 2 when the file exists
    (--force replaces it).
    """
    from mxbench.matrix.file import parse_matrix

    target = path / "matrix.yaml" if path.is_dir() else path
    if (target.exists() or target.is_symlink()) and not force:
        raise UsageError(f"{target} exists; --force replaces it")
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise UsageError(f"{target}: not a regular file; not replaced")
    text = matrix_text()
    parse_matrix(text, str(target), target.resolve().parent)  # what it writes loads
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{target}: cannot write ({exc.strerror})") from None
    typer.echo(f"mxbench: wrote {target}; next: mxbench run --matrix {target} --dry-run")
