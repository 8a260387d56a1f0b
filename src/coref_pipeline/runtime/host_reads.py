"""What counts as a host read (a synchronisation on a GPU) in a ``torch.profiler`` trace: one definition for the
tests that bound them and ``benchmarks/gpu/device_ops.py`` that counts them."""

from __future__ import annotations

from typing import Any

# Operator events that read a tensor's values on the host: ``_local_scalar_dense`` (item, float(), int(), bool(),
# is_nonzero), ``nonzero`` (boolean-mask indexing too), and those whose output size depends on the values.
# ``Tensor.tolist`` / ``Tensor.numpy`` dispatch no operator on a CPU: counted apart, by wrapping them.
READ_OPERATORS = frozenset(
    {
        "aten::_local_scalar_dense",
        "aten::nonzero",
        "aten::_unique2",
        "aten::unique_dim",
        "aten::unique_consecutive",
        "aten::masked_select",
    }
)
# Fused optimisers whose CPU kernels read each parameter's step counter from host memory (a GPU's reads it on the
# device): reads nested in them are not the model's.
FUSED_OPTIMISERS = frozenset({"aten::_fused_adam_", "aten::_fused_adamw_"})


def in_fused_optimiser(event: Any) -> bool:
    """Whether a profiler event is nested in a fused optimiser's operator."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name in FUSED_OPTIMISERS:
            return True
        parent = parent.cpu_parent
    return False
