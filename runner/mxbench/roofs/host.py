"""What the formula needs to know about this machine's CPU, read from /proc/cpuinfo."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class CpuFacts:
    model: str
    vendor: str
    family: int | None
    model_number: int | None
    flags: frozenset[str]
    cores: int  # physical cores this process may run on
    mhz: float | None  # /proc/cpuinfo's (a VM's: the nominal clock)
    max_mhz: float | None  # cpufreq's cpuinfo_max_freq, where the kernel exposes it
    arch: str = field(default_factory=platform.machine)

    @property
    def name(self) -> str:
        return f"cpu: {self.model} ({self.cores} core(s))"


def _blocks(text: str) -> list[dict[str, str]]:
    out = []
    for block in text.strip().split("\n\n"):
        entry = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                entry[key.strip()] = value.strip()
        out.append(entry)
    return out


def _int(value: str | None) -> int | None:
    try:
        return int(value, 0) if value is not None else None
    except ValueError:
        return None


def parse(text: str, allowed: set[int] | None = None) -> CpuFacts:
    """The facts of a /proc/cpuinfo text; ``allowed``: the logical CPUs this process may
    use (their distinct physical cores are counted)."""
    blocks = [b for b in _blocks(text) if "processor" in b]
    mine = [b for b in blocks if allowed is None or _int(b.get("processor")) in allowed]
    first = mine[0] if mine else (blocks[0] if blocks else {})
    cores = {(b.get("physical id", "0"), b.get("core id", b.get("processor"))) for b in mine}
    flags = first.get("flags") or first.get("Features") or ""
    mhz = first.get("cpu MHz")
    return CpuFacts(
        model=first.get("model name") or first.get("Processor") or platform.processor() or "?",
        vendor=first.get("vendor_id", ""),
        family=_int(first.get("cpu family")),
        model_number=_int(first.get("model")),
        flags=frozenset(flags.lower().split()),
        cores=max(1, len(cores)),
        mhz=float(mhz) if mhz else None,
        max_mhz=None,
    )


def read() -> CpuFacts:
    """This machine's CPU (the cores this process may use)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    try:
        allowed: set[int] | None = set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = None
    facts = parse(text, allowed)
    if not text:
        facts = CpuFacts("?", "", None, None, frozenset(), os.cpu_count() or 1, None, None)
    try:
        khz = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text()
        facts = CpuFacts(**{**facts.__dict__, "max_mhz": int(khz) / 1000})
    except (OSError, ValueError):
        pass
    return facts
