"""The clock a core runs at, measured: a chain of dependent integer adds, one per cycle.

A virtual machine's /proc/cpuinfo gives the nominal clock (the time-stamp counter's), not the
boost the cores run at, and a formula peak at the nominal clock sits below what a matmul
reaches. On x86-64 an ``add`` of a register that depends on the one before retires one per
cycle on every core of the last fifteen years, so a loop of them, timed, counts cycles per
second (lmbench's ``mhz`` does the same). The added value is a register, not an immediate:
Intel's cores since Golden Cove fold small immediates into a chain at rename, and a chain of
``add rdx, 1`` read 7.15 GHz on an H200 machine's Xeon (a Sapphire Rapids' boost is under 4).
The loop is a few bytes of machine code in an executable page, called through ctypes; where
that cannot run (another architecture, a kernel that refuses executable anonymous memory)
the answer is None and the caller falls back to the stated clock.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import platform
import time

ADDS_PER_ITERATION = 100
# mov rax, rdi ; xor rdx, rdx ; mov ecx, 1 ; loop: (add rdx, rcx) x 100 ; dec rax ; jnz loop ;
# mov rax, rdx ; ret
_ADD = b"\x48\x01\xca"  # add rdx, rcx (a register: no immediate to fold)
_BODY = _ADD * ADDS_PER_ITERATION + b"\x48\xff\xc8"  # ... ; dec rax
_JUMP_BACK = -(len(_BODY) + 6)  # back to the first add, over jnz rel32 (6 bytes)
_CODE = (
    b"\x48\x89\xf8"  # mov rax, rdi
    + b"\x48\x31\xd2"  # xor rdx, rdx
    + b"\xb9\x01\x00\x00\x00"  # mov ecx, 1
    + _BODY
    + b"\x0f\x85"  # jnz rel32
    + _JUMP_BACK.to_bytes(4, "little", signed=True)
    + b"\x48\x89\xd0"  # mov rax, rdx
    + b"\xc3"  # ret
)


def measured_ghz(iterations: int = 200_000, repeats: int = 7) -> float | None:
    """The core's clock in GHz (the fastest of ``repeats`` timed loops of ``iterations`` x
    100 dependent adds: another process taking the core only ever slows a loop); None where
    the loop cannot run here."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except (OSError, ValueError, AttributeError):
        return None
    try:
        page.write(_CODE)
        address = ctypes.addressof(ctypes.c_char.from_buffer(page))
        loop = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_uint64)(address)
        loop(1000)  # warm the page and the core's clock
        rates: list[float] = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            done = loop(iterations)
            rates.append(float(done) / (time.perf_counter() - t0))
        del loop
        return max(rates) / 1e9
    finally:
        with contextlib.suppress(BufferError):  # a ctypes view still holds the page
            page.close()
