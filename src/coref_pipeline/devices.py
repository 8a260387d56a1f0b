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
import re
import sys

import torch

from coref_pipeline.errors import UserError

logger = logging.getLogger(__name__)

DEVICE_NAMES = "auto, cpu, cuda, cuda:N or mps"
# Set to 0 to leave the C allocator as it is (see keep_host_memory).
KEEP_HOST_MEMORY_VARIABLE = "COREF_PIPELINE_KEEP_HOST_MEMORY"
# glibc's mallopt parameters (malloc.h) and the heap top kept when memory is freed.
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_KEPT_HEAP_TOP_BYTES = 1 << 30
_host_memory_kept = False


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


def keep_host_memory() -> bool:
    """Let glibc's malloc keep the memory of freed large blocks for reuse; True when set (once per process).

    By default glibc serves every block over 32 MB with a fresh ``mmap`` and unmaps
    it when it is freed, so each of a step's large tensors (the fine stage's
    ``[k, c, ffnn]`` and ``[k, c, span_dim]``, some 100 MB each) is page-faulted in
    again every time: about a quarter of a CPU training step here
    (docs/benchmarks.md). With ``mmap`` off and a 1 GB trim threshold, freed blocks
    stay in the heap and the next step reuses them. The values computed do not
    change. Linux with glibc only (elsewhere nothing is done); the environment
    variable ``COREF_PIPELINE_KEEP_HOST_MEMORY=0`` leaves the allocator alone.
    """
    global _host_memory_kept
    if _host_memory_kept:
        return True
    if os.environ.get(KEEP_HOST_MEMORY_VARIABLE, "1").strip() == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl or another C library: no mallopt
        return False
    if not (mallopt(_M_MMAP_MAX, 0) and mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(_KEPT_HEAP_TOP_BYTES))):
        return False
    _host_memory_kept = True
    logger.debug("malloc keeps freed host memory for reuse (%s=0 turns this off)", KEEP_HOST_MEMORY_VARIABLE)
    return True
