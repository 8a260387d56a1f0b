"""fp32 training products on oneDNN where it computes them faster than torch's own path; bf16 prediction products
on a CPU with AMX in rows of a few sizes, so that oneDNN reuses what it compiled.

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

On a CPU with AMX, oneDNN compiles an AMX kernel for each new shape of a bf16 product, and that costs more than the
product: ``predict --precision auto`` over 30 OntoNotes-shaped documents spent 0.96 s compiling 277 kernels for each
document's row counts (the encoder's tokens, the head's kept spans and pairs) and 0.34 s running them, so the default
took 1.08x the time of ``--precision 32`` (``docs/benchmarks.md``, "Throughput of ``predict`` on a CPU").
:func:`reused_product_shapes` is a context in which each bf16 ``linear``, ``addmm`` and 2-D ``matmul`` without a
gradient computes its rows in chunks of ``PRODUCT_CHUNK_ROWS``, the last padded with zero rows to a multiple of
``PRODUCT_ROW_ALIGNMENT``: a product meets at most ``PRODUCT_CHUNK_ROWS / PRODUCT_ROW_ALIGNMENT`` row counts,
whatever the document. A ``matmul`` whose right operand changes with the document too (the coarse scorers: a
segment's spans against its entities' mentions, a document's kept spans against each other) computes its columns in
the same chunks, the last padded with zero columns; a batch of 2-D ``matmul`` (several documents' spans side by side)
each of its products so. Each row is computed by a product of another shape: the same row up to the order of its sums'
terms, which oneDNN may choose by shape (on the AMX host, one cluster of one document of 30 differed in bf16).
Prediction enters it around its bf16 autocast on such a CPU
(:func:`reuses_product_shapes`); elsewhere compiling costs little and the chunks' copies cost more (held to
AVX-512 BF16, a first form of them took 1.07x and 1.13x the time of none), and training never enters it.
"""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

# The primitives oneDNN's cache and ideep's keep (module docstring); read when a process first creates a primitive.
ONEDNN_CACHE_CAPACITY = 64
ONEDNN_CACHE_ENVIRONMENT = {
    "ONEDNN_PRIMITIVE_CACHE_CAPACITY": str(ONEDNN_CACHE_CAPACITY),
    "LRU_CACHE_CAPACITY": str(ONEDNN_CACHE_CAPACITY),
}


# bf16 prediction products on a CPU with AMX (module docstring): rows in chunks of this many, the last padded to a
# multiple of the alignment. Measured on the AMX host (docs/benchmarks.md): chunks of 256 rows cost their copies on
# LitBank's long documents, 2,048 with an alignment of 256 gained on both sets.
PRODUCT_CHUNK_ROWS = 2048
PRODUCT_ROW_ALIGNMENT = 256
# oneDNN's own ceiling on the instructions it uses (a user holding it below AMX gets no AMX kernels to reuse)
ONEDNN_ISA_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")


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


def _linear_operands(args: tuple, kwargs: dict) -> tuple[Any, Any, Any]:
    """``torch.nn.functional.linear``'s input, weight and bias (positional or by keyword; None where absent), as a
    ``TorchFunctionMode`` receives them."""
    x, weight, *rest = args
    return x, weight, rest[0] if rest else kwargs.get("bias")


class _OneDnnProducts(TorchFunctionMode):
    """Sends fp32 ``linear`` and ``addmm`` with a gradient to oneDNN; every other call as it is."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.nn.functional.linear:
            x, weight, bias = _linear_operands(args, kwargs)
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


@functools.cache
def _amx_kernels() -> bool:
    """Whether oneDNN computes bf16 products with AMX here: torch sees AMX tiles, runs its AVX-512 kernels, and
    oneDNN is not held below AMX by its environment."""
    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        return False
    if not getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)():
        return False
    held = [os.environ.get(name, "") for name in ONEDNN_ISA_VARIABLES]
    return all(not isa or "AMX" in isa.upper() or isa.upper() == "ALL" for isa in held)


def reuses_product_shapes(device: torch.device, dtype: torch.dtype | None) -> bool:
    """Whether prediction computing in ``dtype`` on ``device`` computes its products in rows of a few sizes
    (:func:`reused_product_shapes`): bf16 on a CPU whose oneDNN uses AMX."""
    return device.type == "cpu" and dtype == torch.bfloat16 and _amx_kernels()


def _chunk_rows(rows: int) -> Iterator[tuple[int, int, int]]:
    """``(first, rows, padded rows)`` of each chunk of ``rows``: ``PRODUCT_CHUNK_ROWS`` each, the last padded to a
    multiple of ``PRODUCT_ROW_ALIGNMENT``."""
    for first in range(0, rows, PRODUCT_CHUNK_ROWS):
        size = min(PRODUCT_CHUNK_ROWS, rows - first)
        yield first, size, -(-size // PRODUCT_ROW_ALIGNMENT) * PRODUCT_ROW_ALIGNMENT


def _padded(rows: torch.Tensor, count: int) -> torch.Tensor:
    """``rows`` (``[m, ...]``) with zero rows after them up to ``count``."""
    if rows.shape[0] == count:
        return rows
    return torch.cat([rows, rows.new_zeros((count - rows.shape[0], *rows.shape[1:]))])


def _in_chunks(
    product: Callable[..., torch.Tensor], rows: int, *operands: tuple[torch.Tensor | None, bool]
) -> torch.Tensor:
    """``product`` of the ``operands`` (each ``(tensor, chunked)``), computed chunk by chunk over the first dimension
    of those chunked (the others, None where absent, passed whole), each chunk padded (``_chunk_rows``) and its
    product's rows cut back. No rows: the product as it is (an empty one compiles nothing worth reusing)."""
    if not rows:
        return product(*(operand for operand, _ in operands))
    chunks = []
    for first, size, padded in _chunk_rows(rows):
        sliced = [
            _padded(operand[first : first + size], padded) if chunked and operand is not None else operand
            for operand, chunked in operands
        ]
        chunks.append(product(*sliced)[:size])
    return chunks[0] if len(chunks) == 1 else torch.cat(chunks)


def _matmul_in_chunks(product: Callable[..., torch.Tensor], x: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """``product(x, other)`` of ``x`` ``[M, K]`` and ``other`` ``[K, N]``, its rows and its columns in chunks
    (``_chunk_rows`` of each): a product whose right operand changes with the document (the coarse scorers' spans
    against spans or entities) meets a few column counts too. ``[M, N]``."""
    columns = other.shape[1]
    if not columns:
        return _in_chunks(product, x.shape[0], (x, True), (other, False))
    parts = []
    for first, size, padded in _chunk_rows(columns):
        block = _padded(other[:, first : first + size].transpose(0, 1), padded).transpose(0, 1)  # [K, padded]
        parts.append(_in_chunks(product, x.shape[0], (x, True), (block, False))[:, :size])
    return parts[0].contiguous() if len(parts) == 1 else torch.cat(parts, dim=1)


def _bf16_prediction(*tensors: torch.Tensor | None) -> bool:
    """Whether a product of these CPU tensors computes in bf16 without a gradient: under bf16 autocast or of bf16."""
    present = [t for t in tensors if t is not None]
    if torch.is_grad_enabled() or any(not isinstance(t, torch.Tensor) or t.device.type != "cpu" for t in present):
        return False
    if torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16:
        return True
    return any(t.dtype == torch.bfloat16 for t in present)


class _ReusedProductShapes(TorchFunctionMode):
    """bf16 ``linear``, ``addmm`` and 2-D ``matmul`` (and batches of it) without a gradient in row chunks, a
    ``matmul``'s columns too (module docstring); every other call as it is."""

    MATMULS = frozenset({torch.matmul, torch.mm, torch.Tensor.matmul, torch.Tensor.mm, torch.Tensor.__matmul__})

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.nn.functional.linear:
            x, weight, bias = _linear_operands(args, kwargs)
            if x.dim() >= 2 and weight.dim() == 2 and _bf16_prediction(x, weight, bias):
                flat = x.reshape(-1, x.shape[-1])  # [M, K]
                product = _in_chunks(func, flat.shape[0], (flat, True), (weight, False), (bias, False))
                return product.view(*x.shape[:-1], weight.shape[0])  # [..., N]
        elif func is torch.addmm and len(args) == 3 and not kwargs:
            added, x, other = args
            if x.dim() == 2 and other.dim() == 2 and _bf16_prediction(added, x, other):
                rowwise = added.dim() == 2 and added.shape[0] == x.shape[0]  # else a bias broadcast to every row
                return _in_chunks(func, x.shape[0], (added, rowwise), (x, True), (other, False))
        elif func in self.MATMULS and len(args) == 2 and not kwargs:
            x, other = args
            if isinstance(x, torch.Tensor) and isinstance(other, torch.Tensor) and _bf16_prediction(x, other):
                if x.dim() == 2 and other.dim() == 2:
                    return _matmul_in_chunks(func, x, other)
                batched = func not in (torch.mm, torch.Tensor.mm) and x.dim() == 3 and other.dim() == 3
                if batched and x.shape[0] == other.shape[0] and x.shape[0]:
                    # a batch of products (several documents' spans side by side): each one's rows and columns
                    return torch.stack([_matmul_in_chunks(func, *pair) for pair in zip(x, other, strict=True)])
        return func(*args, **kwargs)


@contextmanager
def reused_product_shapes() -> Iterator[None]:
    """Within it, bf16 CPU products without a gradient compute in row chunks of a few shapes (module docstring)."""
    with _ReusedProductShapes():
        yield


# Each parameter's copy in a lower precision for prediction (``cast_once``), by the parameter's id: a weak reference
# to it (the entry leaves with it), what it held when copied (its version counter and its data's address), the copy.
_PREDICTION_COPIES: dict[tuple[int, torch.dtype], tuple[weakref.ref, int, int, torch.Tensor]] = {}


def cast_once(tensor: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """``tensor.to(dtype)`` for prediction, made once a parameter: a ``Parameter``'s copy is kept while it holds the
    same values (its version counter, which every in-place change moves, and its data's address, which a ``.data``
    assignment moves) and while it lives; anything else is cast as it is. Autocast casts each weight again at every
    product where the weight records no gradient (a model loaded for prediction): on a CPU with AMX 1.6 ms of each
    OntoNotes-shaped document's encoder pass (``docs/benchmarks.md``). The same values as autocast's cast."""
    if tensor is None or tensor.dtype == dtype:
        return tensor
    if not isinstance(tensor, torch.nn.Parameter):
        return tensor.to(dtype)
    key = (id(tensor), dtype)
    kept = _PREDICTION_COPIES.get(key)
    if kept is not None and kept[0]() is tensor and kept[1:3] == (tensor._version, tensor.data_ptr()):
        return kept[3]
    copy = tensor.detach().to(dtype)
    _PREDICTION_COPIES[key] = (
        weakref.ref(tensor, lambda _, key=key: _PREDICTION_COPIES.pop(key, None)),
        tensor._version,
        tensor.data_ptr(),
        copy,
    )
    return copy


class _CastOnce(TorchFunctionMode):
    """``linear`` under autocast without a gradient, its weight and bias cast by :func:`cast_once` (autocast then casts
    only the input); every other call as it is."""

    def __init__(self, device_type: str) -> None:
        super().__init__()
        self.device_type = device_type

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.nn.functional.linear and not torch.is_grad_enabled():
            if torch.is_autocast_enabled(self.device_type):
                dtype = torch.get_autocast_dtype(self.device_type)
                x, weight, bias = _linear_operands(args, kwargs)
                if isinstance(weight, torch.Tensor) and weight.dtype == torch.float32:
                    return func(x, cast_once(weight, dtype), cast_once(bias, dtype))
        return func(*args, **kwargs)


@contextmanager
def prediction_autocast(device: torch.device, dtype: torch.dtype) -> Iterator[None]:
    """Autocast to ``dtype`` on ``device`` for prediction, its products in rows of a few sizes where that reuses
    oneDNN's AMX kernels (:func:`reuses_product_shapes`), and on a CPU each ``linear``'s parameters cast once
    (:func:`cast_once`)."""
    shapes = reused_product_shapes() if reuses_product_shapes(device, dtype) else nullcontext()
    once = _CastOnce(device.type) if device.type == "cpu" else nullcontext()
    with torch.autocast(device_type=device.type, dtype=dtype), shapes, once:
        yield
