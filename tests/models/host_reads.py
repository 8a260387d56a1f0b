"""Counting the host reads (synchronisations on a GPU) and operator events of a piece of model code.

As benchmarks/gpu/device_ops.py counts them (``runtime.host_reads``): the operator events that read a tensor's values
(``_local_scalar_dense``: item, float(), int(), bool(); ``nonzero``, boolean-mask indexing too; ``unique``,
``masked_select``) under ``torch.profiler``, nested ones included, but for those inside a fused optimiser (a CPU
kernel reading its host-side step counter), and ``Tensor.tolist`` / ``Tensor.numpy`` calls (on a CPU they
dispatch no operator).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from coref_pipeline.runtime.host_reads import READ_OPERATORS, in_fused_optimiser


@dataclass
class Counted:
    reads: int = 0  # host reads
    events: int = 0  # aten operator events


@contextmanager
def counting_host_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counted]:
    """Count the block's host reads and operator events; the ``Counted`` yielded is filled when it ends."""
    counted = Counted()
    originals = {name: getattr(torch.Tensor, name) for name in ("tolist", "numpy")}

    def reading(original):
        def read(tensor, *args, **kwargs):
            counted.reads += 1
            return original(tensor, *args, **kwargs)

        return read

    with profile(activities=[ProfilerActivity.CPU]) as profiler, monkeypatch.context() as patch:
        for name, original in originals.items():
            patch.setattr(torch.Tensor, name, reading(original))
        yield counted
    for event in profiler.events():
        if event.name in READ_OPERATORS and not in_fused_optimiser(event):
            counted.reads += 1
        counted.events += event.name.startswith("aten::")
