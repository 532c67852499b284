"""The interconnect facts (issue 36, Deliver 1): ``nvidia-smi topo -m`` parsed into the
record, the NCCL version, and an honest "not readable" on a host without them. No GPU here:
the matrix is text as nvidia-smi prints it (tests/fixtures), handed in at the subprocess
seam only."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest
from mxbench.bench.parallel import interconnect
from mxbench.cells.cell import cell_key
from mxbench.matrix.params import Params

from mxbench.report import document
from mxbench.report.load import load
from mxbench.report.tables import build
from report_records import rec, write

FIXTURES = Path(__file__).parent / "fixtures"
DGX = (FIXTURES / "nvidia_smi_topo_dgx_h100.txt").read_text()
TWO_PCIE = (FIXTURES / "nvidia_smi_topo_2gpu_pcie.txt").read_text()
FOUR_PCIE = (FIXTURES / "nvidia_smi_topo_4gpu_pcie_bold.txt").read_text()


def printing(stdout: str, returncode: int = 0, stderr: str = "") -> Any:
    """subprocess.run as nvidia-smi would answer it (the seam), checking how it is called."""

    def run(args: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        assert args == ["nvidia-smi", "topo", "-m"] and kw.get("timeout")
        assert "shell" not in kw
        return subprocess.CompletedProcess(args, returncode, stdout, stderr)

    return run


def test_the_dgx_matrix_gives_nvlink_between_every_pair_and_leaves_the_nics_out() -> None:
    links = interconnect.parse(DGX)
    assert len(links) == 8 * 7 and set(links.values()) == {"NV18"}
    found = interconnect.read([f"gpu:{i}" for i in range(8)], run=printing(DGX))
    assert len(found.links) == 28 and found.slowest == "NV18"
    assert found.links["GPU3-GPU6"] == "NV18" and found.topology == "nvidia-smi topo -m"
    assert not any("GPU links" in u for u in found.unreadable)


def test_two_pcie_cards_on_two_sockets_are_sys() -> None:
    found = interconnect.read(["GPU:0", "GPU:1"], run=printing(TWO_PCIE))
    assert found.links == {"GPU0-GPU1": "SYS"} and found.slowest == "SYS"
    # the same text with its tabs expanded (as pasted from a terminal) reads the same
    assert interconnect.parse(TWO_PCIE.expandtabs()) == interconnect.parse(TWO_PCIE)


def test_the_gpus_used_are_the_visible_ones_and_the_slowest_link_counts() -> None:
    """A bold header (nvidia-smi on a terminal) is read too; CUDA_VISIBLE_DEVICES=2,3 means
    nvidia-smi's GPU2 and GPU3; three GPUs from 0 span a PIX and two NODE paths."""
    assert interconnect.links(2, printing(FOUR_PCIE), {"CUDA_VISIBLE_DEVICES": "2,3"}) == (
        {"GPU2-GPU3": "PXB"}, None)  # fmt: skip
    found, why = interconnect.links(3, printing(FOUR_PCIE), {})
    assert why is None and found == {"GPU0-GPU1": "PIX", "GPU0-GPU2": "NODE", "GPU1-GPU2": "NODE"}
    assert max(found.values(), key=interconnect.rank) == "NODE"
    assert sorted(["SYS", "NV4", "PIX", "NV18", "PHB"], key=interconnect.rank) == [
        "NV18", "NV4", "PIX", "PHB", "SYS"]  # fmt: skip


def test_what_cannot_be_read_is_said() -> None:
    broken = printing("", 9, "NVIDIA-SMI has failed because it couldn't communicate with the "
                             "NVIDIA driver.")  # fmt: skip
    found = interconnect.read(["gpu:0", "gpu:1"], run=broken)
    assert found.links == {} and found.slowest is None and found.topology is None
    assert any("exited 9: NVIDIA-SMI has failed" in u for u in found.unreadable)
    cpu = interconnect.read(["cpu:0", "cpu:1"], run=broken)
    assert "the devices are not GPUs" in cpu.unreadable[0]


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a host with nvidia-smi")
def test_on_this_cpu_host_nvidia_smi_is_not_found_for_real() -> None:
    found = interconnect.read(["gpu:0", "gpu:1"])  # the real subprocess.run
    assert found.unreadable[0] == "GPU links: nvidia-smi not found (no NVIDIA driver here)"


def test_the_nccl_version_from_its_integer_and_from_this_host() -> None:
    assert interconnect.nccl_version(22105) == "2.21.5"
    assert interconnect.nccl_version(2708) == "2.7.8"
    version, source = interconnect.nccl()
    assert source  # a version and what told it, or why there is none
    if version is None:
        assert "no libnccl.so.2" in source


def _record(n: int, k: int, ic: dict[str, Any] | None) -> dict[str, Any]:
    rng = random.Random(k)
    samples = [round(100.0 * n * rng.lognormvariate(0, 0.02), 3) for _ in range(20)]
    r = rec("h", "float32", 32, median=sorted(samples)[10], device={"kind": "gpu", "name": "H100"})
    r["params"].update(devices=n, repeat=k)
    r["metrics"] = {"step_ms": {"median": sorted(samples)[10], "n": 20, "samples": samples}}
    if n > 1:
        r["distribution"] = {"devices": n, "global_batch": 32 * n, "per_device_batch": 32,
                             "interconnect": ic}  # fmt: skip
    r["cell"] = cell_key("h", None, None, Params(**r["params"]))
    return r


def test_the_map_notes_the_links_and_nccl_in_every_format(tmp_path: Path) -> None:
    ic = interconnect.read([f"gpu:{i}" for i in range(8)], run=printing(DGX))
    ic.nccl, ic.nccl_from, ic.unreadable = "2.21.5", "libnccl.so.2 (ncclGetVersion)", []
    said = json.loads(msgspec.json.encode(ic))
    records = [_record(n, k, said) for n in (1, 8) for k in range(2)]
    loaded = load([write(tmp_path / "r.jsonl", records)])
    doc = document.build(loaded, build(loaded.winners))
    (m,) = doc.scaling
    line = "interconnect at N = 8: links between the GPUs used (nvidia-smi topo -m): NV18 x28"
    assert any(n.startswith(line) and "NCCL 2.21.5" in n for n in m.notes), m.notes
    for fmt in ("markdown", "html", "terminal", "json"):
        assert "NV18 x28" in document.render(doc, fmt), fmt
