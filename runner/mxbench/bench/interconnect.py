"""How a cell's devices are linked, where it can be read: the GPU-to-GPU matrix of
``nvidia-smi topo -m`` and the NCCL version. On a host without NVIDIA's driver, neither can
be read, and the record says so (never a guess).

- **Links**: ``nvidia-smi topo -m`` prints a matrix (tab separated, ``X`` on the diagonal;
  NIC rows and columns, CPU and NUMA affinity beside it; a legend below). The record keeps
  the link between each pair of the GPUs used (``NV18``: 18 bonded NVLinks; ``PIX``: one PCIe
  bridge; ``PXB``: several; ``PHB``: a host bridge; ``NODE``: host bridges of one NUMA node;
  ``SYS``: across NUMA nodes) and the slowest of them, what a ring all-reduce waits on. The
  GPUs used are the first N the process sees, as nvidia-smi numbers them through
  ``CUDA_VISIBLE_DEVICES`` when it lists indices (a container sees its own GPUs as 0..N-1).
- **NCCL**: the library the process would load (``ncclGetVersion`` of ``libnccl.so.2``),
  else the version of NVIDIA's NCCL wheel (``nvidia-nccl-cu12``: what JAX's and TensorFlow's
  CUDA wheels bring), else PyTorch's ``torch.cuda.nccl.version()`` where torch is imported.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

from mxbench.records.record import Interconnect

TOPOLOGY = ("nvidia-smi", "topo", "-m")
TIMEOUT_S = 30.0
NCCL_WHEELS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")
# PCIe and system paths, fastest first (an NVLink bond, NV#, is faster than any of them)
PCIE = ("PIX", "PXB", "PHB", "NODE", "SYS")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")

Runner = Callable[..., Any]  # subprocess.run's shape: the seam the tests replace


def parse(text: str) -> dict[tuple[int, int], str]:
    """The GPU-to-GPU links of ``nvidia-smi topo -m``'s matrix, keyed by (row, column)
    GPU index (both directions; the diagonal left out). Empty: no matrix found."""
    lines = [_ANSI.sub("", x) for x in text.splitlines()]
    cells = [[c.strip() for c in re.split(r"\t| {2,}", x.strip()) if c.strip()] for x in lines]
    header = next((c for c in cells if c and c[0] == "GPU0"), None)
    if header is None:
        return {}
    columns = {name: k for k, name in enumerate(header)}
    out: dict[tuple[int, int], str] = {}
    for row in cells:
        if len(row) < 2 or not re.fullmatch(r"GPU\d+", row[0]) or row is header:
            continue
        i = int(row[0][3:])
        for name, k in columns.items():
            gpu = re.fullmatch(r"GPU(\d+)", name)
            if gpu and k + 1 < len(row) and int(gpu.group(1)) != i:
                out[(i, int(gpu.group(1)))] = row[k + 1]
    return out


def rank(link: str) -> tuple[int, int]:
    """Sorts links fastest first: NV# by its count of links, then PCIe's and the system's
    paths in :data:`PCIE`'s order; anything else last."""
    bonded = re.fullmatch(r"NV(\d+)", link)
    if bonded:
        return (0, -int(bonded.group(1)))
    return (1 + PCIE.index(link), 0) if link in PCIE else (1 + len(PCIE), 0)


def visible(n: int, env: dict[str, str] | None = None) -> list[int]:
    """The nvidia-smi indices of the first ``n`` GPUs this process sees: through
    ``CUDA_VISIBLE_DEVICES`` where it lists indices, else 0..n-1."""
    listed = (env if env is not None else os.environ).get("CUDA_VISIBLE_DEVICES", "")
    parts = [x.strip() for x in listed.split(",") if x.strip()]
    if parts and all(x.isdigit() for x in parts):
        return [int(x) for x in parts[:n]]
    return list(range(n))


def links(
    n: int, run: Runner = subprocess.run, env: dict[str, str] | None = None
) -> tuple[dict[str, str], str | None]:
    """The links between the first ``n`` GPUs (``GPU0-GPU1``: ``NV18``), and why not
    (None: read)."""
    try:
        done = run(list(TOPOLOGY), capture_output=True, text=True, timeout=TIMEOUT_S,
                   check=False)  # fmt: skip
    except FileNotFoundError:
        return {}, "GPU links: nvidia-smi not found (no NVIDIA driver here)"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {}, f"GPU links: nvidia-smi topo -m failed ({type(exc).__name__})"
    if done.returncode != 0:
        said = (done.stderr or done.stdout or "").strip().splitlines()[-1:] or ["no output"]
        return {}, f"GPU links: nvidia-smi topo -m exited {done.returncode}: {said[0][:200]}"
    matrix = parse(done.stdout)
    gpus = visible(n, env)
    found = {f"GPU{a}-GPU{b}": matrix[(a, b)] for k, a in enumerate(gpus) for b in gpus[k + 1:]
             if (a, b) in matrix}  # fmt: skip
    if len(found) < n * (n - 1) // 2:
        return found, f"GPU links: nvidia-smi topo -m lists no link between GPUs {gpus}"
    return found, None


def nccl_version(code: int) -> str:
    """``2.21.5`` from ``ncclGetVersion``'s integer (``22105``; before 2.9: ``2708``)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def nccl() -> tuple[str | None, str | None]:
    """(the NCCL version, what told it), or (None, why not)."""
    try:
        lib = ctypes.CDLL("libnccl.so.2")
        code = ctypes.c_int()
        if lib.ncclGetVersion(ctypes.byref(code)) == 0:
            return nccl_version(code.value), "libnccl.so.2 (ncclGetVersion)"
    except (OSError, AttributeError):
        pass
    for wheel in NCCL_WHEELS:
        try:
            return importlib.metadata.version(wheel), f"the {wheel} wheel"
        except importlib.metadata.PackageNotFoundError:
            continue
    torch: Any = sys.modules.get("torch")  # never imported for this: only where it is
    if torch is not None:
        try:
            return ".".join(map(str, torch.cuda.nccl.version())), "torch.cuda.nccl.version()"
        except Exception:  # a CPU build of torch has no NCCL
            pass
    return None, "NCCL: no libnccl.so.2, no NVIDIA NCCL wheel, no torch with NCCL"


def read(device_names: Sequence[str], run: Runner = subprocess.run) -> Interconnect:
    """The interconnect of a cell's devices: GPU links where its devices are GPUs, NCCL's
    version wherever it can be found."""
    unreadable = []
    gpus = [d for d in device_names if d.lower().startswith("gpu")]
    found: dict[str, str] = {}
    if len(gpus) > 1:
        found, why = links(len(gpus), run)
        if why:
            unreadable.append(why)
    else:
        unreadable.append("GPU links: the devices are not GPUs (no GPU-to-GPU link to read)")
    version, source = nccl()
    if version is None:
        unreadable.append(str(source))
    return Interconnect(
        topology=" ".join(TOPOLOGY) if found else None,
        links=found,
        slowest=max(found.values(), key=rank) if found else None,
        nccl=version,
        nccl_from=source if version else None,
        unreadable=unreadable,
    )
