"""Where the model runs: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.

``auto`` takes a CUDA GPU when torch sees one, else Apple's MPS, else the CPU. A
device that is asked for and absent is a :class:`DeviceError` (one line that names
it and says what to use instead).
"""

from __future__ import annotations

import re

import torch

from coref_pipeline.errors import UserError

DEVICE_NAMES = "auto, cpu, cuda, cuda:N or mps"


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
