"""fp32 training products on oneDNN where it computes them faster than torch's own path.

On a CPU where torch runs its AVX-512 kernels, torch computes fp32 matrix products through MKL, and sends
them to oneDNN only at reduced precision. oneDNN's AVX-512 kernel runs the products of a training step at
about twice MKL's rate on the AMD EPYC the benchmarks measure (``docs/benchmarks.md``, "Peers": the pair
scorer's product term, ``[20600, 1172] x [1172, 1000]``, 131 ms against 259 forward). :func:`onednn_products`
is a context in which every fp32 ``torch.nn.functional.linear`` and ``torch.addmm`` (of a product-shaped
addend) with a gradient to compute goes to oneDNN (``torch.ops.mkldnn._linear_pointwise``), with a backward of
its own: the input's gradient on oneDNN, the weight's on oneDNN over strided views (no transposed copies), the
bias's a sum.

The training engine enters it around each fp32 forward on such a CPU (:func:`onednn_products_reason`). The
products are the same up to the order of a sum's terms. Prediction never enters it (no gradient), so that
``--precision 32`` keeps its arithmetic to the bit; below AVX-512 (an AVX2 CPU, or torch held there by
``ATEN_CPU_CAPABILITY``) the two libraries compute at one rate and torch's own path stays.

oneDNN and ideep (torch's layer over it) keep a compiled primitive for every shape they meet, up to 1,024 each,
and a training step's shapes change with every crop: the kept primitives, scattered through the heap that
``runtime.devices.keep_host_memory`` keeps, split its free blocks, and the process grew by about a gigabyte every
20 steps, each growth a page-faulted step of about twice the time. :func:`bound_onednn_caches` holds both caches
to ``ONEDNN_CACHE_CAPACITY`` primitives (about two steps' shapes) before oneDNN first reads them: measured at the
peer configuration (``benchmarks/training/onednn_products.py``), the steps' mean time at 64 was below both 1,024's
and no cache's, and the resident memory MKL's. The same holds wherever torch itself sends products to oneDNN: in
bf16 (training under autocast, and prediction's bf16 encoder and scorers, whose rows change with every document),
where at 1,024 a prediction held about a gigabyte more after a thousand documents and a training process about two
more after sixty steps, each about a tenth slower (``benchmarks/memory/onednn_caches.py``). So every CPU process of
the project bounds them: the training engine on a CPU in any precision, and each ``CorefModel`` on a CPU.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

# The primitives oneDNN's cache and ideep's keep (module docstring); read when a process first creates a primitive.
ONEDNN_CACHE_CAPACITY = 64
ONEDNN_CACHE_ENVIRONMENT = {
    "ONEDNN_PRIMITIVE_CACHE_CAPACITY": str(ONEDNN_CACHE_CAPACITY),
    "LRU_CACHE_CAPACITY": str(ONEDNN_CACHE_CAPACITY),
}


def _pointwise_linear() -> Callable[..., torch.Tensor] | None:
    """oneDNN's linear (input ``[M, K]``, weight ``[N, K]``, bias): ``input @ weight.T + bias``; None where absent."""
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._linear_pointwise
    except (AttributeError, RuntimeError):  # a torch built without it
        return None


def onednn_products_reason(device: torch.device) -> str | None:
    """Why fp32 training products on ``device`` go to oneDNN (for the log), or None when they stay on torch's path:
    a CPU whose AVX-512 kernels torch runs, with torch's oneDNN operators."""
    if device.type != "cpu" or torch.backends.cpu.get_cpu_capability() != "AVX512":
        return None
    if _pointwise_linear() is None:
        return None
    return "fp32 products with a gradient on oneDNN (this CPU's AVX-512 kernels: about twice MKL's rate)"


def bound_onednn_caches() -> None:
    """Hold oneDNN's and ideep's per-shape caches to ``ONEDNN_CACHE_CAPACITY`` primitives for this process, where the
    environment does not set them already: effective when called before the process's first oneDNN operation."""
    for name, value in ONEDNN_CACHE_ENVIRONMENT.items():
        os.environ.setdefault(name, value)


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ weight.T + bias`` on oneDNN, ``x`` 2-D."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def _product_gradients(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, needs_x: bool, needs_weight: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The gradients of ``x @ weight.T`` (``x`` ``[M, K]``, ``weight`` ``[N, K]``) from the output's ``grad``
    (``[M, N]``, contiguous), each on oneDNN where needed: ``x``'s ``[M, K]`` and ``weight``'s ``[N, K]``, the latter
    over strided views (no transposed copies)."""
    grad_x = _linear(grad, weight.t().contiguous(), None) if needs_x else None
    grad_weight = _linear(grad.t(), x.t(), None) if needs_weight else None
    return grad_x, grad_weight


class _OneDnnLinear(torch.autograd.Function):
    """``linear(x, weight, bias)`` for ``x`` of any leading shape, forward and backward on oneDNN."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1]).contiguous()  # [M, K]
        ctx.save_for_backward(flat, weight)
        ctx.leading = x.shape[:-1]
        ctx.has_bias = bias is not None
        return _linear(flat, weight.contiguous(), bias).view(*x.shape[:-1], weight.shape[0])  # [..., N]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        flat, weight = ctx.saved_tensors  # [M, K], [N, K]
        grad = grad.reshape(-1, grad.shape[-1]).contiguous()  # [M, N]
        grad_x, grad_weight = _product_gradients(grad, flat, weight, *ctx.needs_input_grad[:2])
        if grad_x is not None:
            grad_x = grad_x.view(*ctx.leading, flat.shape[1])  # [..., K]
        grad_bias = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None  # [N]
        return grad_x, grad_weight, grad_bias


class _OneDnnAddmm(torch.autograd.Function):
    """``addmm(added, x, weight.T)`` with ``added`` of the product's shape ``[M, N]``: oneDNN sums it into the
    product as it writes it."""

    @staticmethod
    def forward(ctx: Any, added: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()  # [M, K]
        ctx.save_for_backward(x, weight)
        return torch.ops.mkldnn._linear_pointwise.binary(x, added.contiguous(), weight.contiguous(), None, "add")

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = ctx.saved_tensors  # [M, K], [N, K]
        grad = grad.contiguous()  # [M, N]
        grad_x, grad_weight = _product_gradients(grad, x, weight, *ctx.needs_input_grad[1:3])
        return grad if ctx.needs_input_grad[0] else None, grad_x, grad_weight


def _routed(*tensors: torch.Tensor | None) -> bool:
    """Whether a product of these tensors goes to oneDNN: fp32 CPU tensors, one of them with a gradient to compute."""
    present = [t for t in tensors if t is not None]
    return (
        torch.is_grad_enabled()
        and all(isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.device.type == "cpu" for t in present)
        and any(t.requires_grad for t in present)
    )


class _OneDnnProducts(TorchFunctionMode):
    """Sends fp32 ``linear`` and ``addmm`` with a gradient to oneDNN; every other call as it is."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.nn.functional.linear:
            x, weight, *rest = args
            bias = rest[0] if rest else kwargs.get("bias")
            if x.dim() >= 2 and weight.dim() == 2 and _routed(x, weight, bias):
                return _OneDnnLinear.apply(x, weight, bias)
        elif func is torch.addmm and not kwargs and len(args) == 3:
            added, x, other = args
            if x.dim() == 2 and other.dim() == 2 and added.shape == (x.shape[0], other.shape[1]):
                if _routed(added, x, other):
                    return _OneDnnAddmm.apply(added, x, other.t())
        return func(*args, **kwargs)


@contextmanager
def onednn_products() -> Iterator[None]:
    """Within it, fp32 CPU ``linear`` and ``addmm`` with a gradient to compute run on oneDNN (module docstring)."""
    with _OneDnnProducts():
        yield
