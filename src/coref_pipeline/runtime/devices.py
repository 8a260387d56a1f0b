"""Where the model runs: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.

``auto`` takes a CUDA GPU when torch sees one, else Apple's MPS, else the CPU. A
device that is asked for and absent is a :class:`DeviceError` (one line that names
it and says what to use instead).

:func:`keep_host_memory` sets the C allocator so that the large CPU tensors a
training step or a prediction frees are reused instead of handed back to the
operating system (see its docstring).
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import re
import sys
from collections.abc import Mapping

import torch

from coref_pipeline.errors import UserError

logger = logging.getLogger(__name__)

DEVICE_NAMES = "auto, cpu, cuda, cuda:N or mps"
# Set to 0 to leave the C allocator as it is (see keep_host_memory).
KEEP_HOST_MEMORY_VARIABLE = "COREF_PIPELINE_KEEP_HOST_MEMORY"
# glibc's mallopt parameters (malloc.h) and the heap top kept when memory is freed.
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_KEPT_HEAP_TOP_BYTES = 1 << 30
# Below this much physical memory the setting stays off unless the variable is 1: its bound
# (a quarter of the memory) would be too small to keep what a step frees.
KEEP_HOST_MEMORY_MIN_RAM_BYTES = 16 << 30
_free_resident_bound_bytes = 0  # a quarter of physical memory, set by keep_host_memory
_resident_outside_heap_bytes = 0  # resident memory not in malloc's in-use blocks when keep_host_memory set it


class DeviceError(UserError, ValueError):
    """A device that is not on this machine, or not a device name."""


def resolve_device(name: str | torch.device | None = "auto") -> torch.device:
    """The ``torch.device`` for a configured name (``None`` is ``auto``)."""
    if isinstance(name, torch.device):
        return name
    name = (name or "auto").strip().lower()
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cpu":
        return torch.device("cpu")
    match = re.fullmatch(r"cuda(?::(\d+))?", name)
    if match:
        if not torch.cuda.is_available():
            built = "a CUDA build" if torch.version.cuda else "a CPU-only build"
            raise DeviceError(
                f"device {name!r} was asked for, but torch {torch.__version__} ({built}) sees no CUDA GPU "
                f"on this machine: use device cpu (or auto)"
            )
        index = int(match.group(1) or 0)
        if index >= torch.cuda.device_count():
            raise DeviceError(
                f"device {name!r} was asked for, but this machine has {torch.cuda.device_count()} CUDA GPU(s) "
                f"(cuda:0 to cuda:{torch.cuda.device_count() - 1})"
            )
        return torch.device("cuda", index)
    if name == "mps":
        if not torch.backends.mps.is_available():
            raise DeviceError(
                "device 'mps' was asked for, but torch sees no Apple MPS device: use device cpu (or auto)"
            )
        return torch.device("mps")
    raise DeviceError(f"unknown device {name!r}: use {DEVICE_NAMES}")


def native_bf16(device: torch.device) -> str | None:
    """Why ``device`` computes bf16 natively (for the log), or None when it does not.

    A CUDA GPU that supports bf16 (compute capability 8.0 and up), or a CPU with AMX or
    AVX-512 BF16 (what torch's CPU information reports) whose AVX-512 kernels torch runs. Elsewhere
    bf16 is emulated, slower than fp32 (an Apple MPS device is left at fp32 too): also where
    ``ATEN_CPU_CAPABILITY`` holds torch below AVX-512 on such a CPU (as when it stands in for an
    AVX2-only CPU), where the incremental model's bf16 training step took 8 times its fp32 step.
    """
    if device.type == "cuda":
        return "a CUDA GPU with bf16" if torch.cuda.is_bf16_supported() else None
    if device.type == "cpu":
        if torch.backends.cpu.get_cpu_capability() != "AVX512":
            return None
        if getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)():
            return "a CPU with AMX"
        if getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)():
            return "a CPU with AVX-512 BF16"
    return None


def resolve_precision(precision: str, device: torch.device) -> str:
    """``precision`` as configured, or for ``auto``: ``bf16-mixed`` where ``device`` computes bf16 natively
    (:func:`native_bf16`), else ``32``; the choice is logged."""
    if precision != "auto":
        return precision
    reason = native_bf16(device)
    chosen = "bf16-mixed" if reason is not None else "32"
    logger.info(
        "precision auto: %s (%s)", chosen, reason or f"this {device.type} has no native bf16, so fp32 is faster"
    )
    return chosen


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (malloc.h, glibc 2.33 and later)."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


_libc: ctypes.CDLL | None = None  # set once keep_host_memory has set the allocator


def keep_host_memory() -> bool:
    """Let glibc's malloc keep freed large blocks for reuse, up to a bound; True when set (once per process).

    By default glibc serves every block over 32 MB with a fresh ``mmap`` and unmaps
    it when it is freed, so each of a step's large tensors (the fine stage's
    ``[k, c, ffnn]`` and ``[k, c, span_dim]``, some 100 MB each) is page-faulted in
    again every time: about a quarter of a CPU training step here
    (docs/benchmarks.md). With ``mmap`` off, freed blocks stay in the heap and the next
    step reuses them. The heap's free part grows as documents of other sizes come
    (torch's 64-byte aligned requests rarely fit a freed block exactly), so
    :func:`bound_host_memory`, called after each training step and each predicted
    document, hands free pages back once more than a quarter of the machine's memory is
    free in the heap and resident. The values computed do not change. Linux with glibc 2.33 or later
    only (elsewhere nothing is done). ``COREF_PIPELINE_KEEP_HOST_MEMORY``: ``0`` leaves
    the allocator alone, ``1`` sets it; unset, it is set on machines with 16 GiB or more.
    """
    global _libc, _free_resident_bound_bytes, _resident_outside_heap_bytes
    if _libc is not None:
        return True
    wanted = os.environ.get(KEEP_HOST_MEMORY_VARIABLE, "").strip()
    if wanted == "0" or not sys.platform.startswith("linux"):
        return False
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if wanted != "1" and memory < KEEP_HOST_MEMORY_MIN_RAM_BYTES:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2  # and malloc_trim: bound_host_memory needs both
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):  # musl, or a glibc older than 2.33 (no mallinfo2)
        return False
    if not (libc.mallopt(_M_MMAP_MAX, 0) and libc.mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(_KEPT_HEAP_TOP_BYTES))):
        return False
    _libc, _free_resident_bound_bytes = libc, memory // 4
    _resident_outside_heap_bytes = max(0, resident_bytes() - libc.mallinfo2().uordblks)
    logger.debug("malloc keeps freed host memory for reuse (%s=0 turns this off)", KEEP_HOST_MEMORY_VARIABLE)
    return True


# A process under held_memory_environment maps every block of this size or more for itself and unmaps it when freed.
HELD_BLOCK_BYTES = 256 * 1024


def held_memory_environment(environment: Mapping[str, str]) -> dict[str, str] | None:
    """``environment`` for a process whose resident set holds only what is in use, to measure memory: the kept heap
    off (``COREF_PIPELINE_KEEP_HOST_MEMORY=0``) and glibc's mmap and trim thresholds at ``HELD_BLOCK_BYTES``
    (appended to any ``GLIBC_TUNABLES`` given), so that a freed large block leaves the resident set; slower, each
    large block faulted in anew. None where the C library is not glibc's (no such setting)."""
    if platform.libc_ver()[0] != "glibc":
        return None
    tunables = f"glibc.malloc.mmap_threshold={HELD_BLOCK_BYTES}:glibc.malloc.trim_threshold={HELD_BLOCK_BYTES}"
    inherited = environment.get("GLIBC_TUNABLES")
    return {
        **environment,
        KEEP_HOST_MEMORY_VARIABLE: "0",
        "GLIBC_TUNABLES": f"{inherited}:{tunables}" if inherited else tunables,
    }


def resident_bytes() -> int:
    """This process's resident set (``/proc/self/statm``), in bytes."""
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def bound_host_memory() -> bool:
    """Under :func:`keep_host_memory`: when more than a quarter of the machine's memory is free in the
    heap and resident, hand those pages back to the system (``malloc_trim``); True when it did.

    The free resident part is the resident set less malloc's blocks in use and less what was
    resident outside them when :func:`keep_host_memory` set the allocator (libraries, the
    interpreter). It is not the heap's free bytes (``fordblks``): trimmed blocks stay in the
    heap, free, without pages, and are faulted in again when reused; counting them would trim
    after every step once the bound was first passed.
    """
    if _libc is None:
        return False
    free_resident = resident_bytes() - _libc.mallinfo2().uordblks - _resident_outside_heap_bytes
    if free_resident <= _free_resident_bound_bytes:
        return False
    _libc.malloc_trim(0)
    return True
