"""fp32 training products on oneDNN: the same values and gradients as torch's own path, only where a gradient is
computed, and only where the engine decides it (a CPU whose AVX-512 kernels torch runs). bf16 prediction products in
row chunks of a few shapes: the same rows, only without a gradient, only where oneDNN computes with AMX."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from coref_pipeline.runtime import onednn
from coref_pipeline.runtime.onednn import (
    ONEDNN_CACHE_ENVIRONMENT,
    PRODUCT_CHUNK_ROWS,
    PRODUCT_ROW_ALIGNMENT,
    bound_onednn_caches,
    onednn_products,
    onednn_products_reason,
    prediction_autocast,
    reused_product_shapes,
    reuses_product_shapes,
)
from coref_pipeline.training.engine import Engine
from tests.training.distributed import DOCUMENTS, tiny_baseline, training_config

needs_onednn = pytest.mark.skipif(
    onednn._pointwise_linear() is None, reason="this torch has no oneDNN linear (torch.ops.mkldnn._linear_pointwise)"
)


class Calls:
    """Counts the products sent to oneDNN."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        for function in (onednn._OneDnnLinear, onednn._OneDnnAddmm):
            monkeypatch.setattr(function, "apply", self.counted(function.apply))

    def counted(self, apply):
        def wrapped(*args):
            self.count += 1
            return apply(*args)

        return wrapped


def forward_and_gradients(routed: bool, bias: bool) -> list[torch.Tensor]:
    """A linear layer over a 3-D input, then an addmm of a product-shaped addend, its loss backpropagated: the
    output and every gradient."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4, 50, 96, generator=generator).requires_grad_()
    weight = torch.randn(80, 96, generator=generator).requires_grad_()
    b = torch.randn(80, generator=generator).requires_grad_() if bias else None
    other = torch.randn(80, 96, generator=generator).requires_grad_()  # used transposed, as a weight is
    with onednn_products() if routed else torch.enable_grad():
        hidden = F.linear(x, weight, b)  # [4, 50, 80]
        out = torch.addmm(hidden.reshape(200, 80), x.reshape(200, 96), other.T)  # [200, 80]
    out.square().mean().backward()
    return [out.detach(), x.grad, weight.grad, other.grad] + ([b.grad] if bias else [])


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
def test_products_and_gradients_match_torch_to_fp32_rounding(monkeypatch, bias):
    calls = Calls(monkeypatch)
    expected = forward_and_gradients(routed=False, bias=bias)
    assert calls.count == 0
    got = forward_and_gradients(routed=True, bias=bias)
    assert calls.count == 2  # the linear and the addmm both went to oneDNN
    for want, have in zip(expected, got, strict=True):
        assert have.dtype == torch.float32 and have.shape == want.shape
        # sums of at most 200 products in another order: fp32 rounding, far below a bf16 product's 4e-3
        torch.testing.assert_close(have, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


@needs_onednn
def test_products_without_a_gradient_bf16_or_other_shapes_stay_on_torch(monkeypatch):
    calls = Calls(monkeypatch)
    x, weight = torch.randn(30, 16), torch.randn(8, 16, requires_grad=True)
    with onednn_products():
        with torch.no_grad():
            assert torch.equal(F.linear(x, weight), x @ weight.T)  # prediction: torch's own bits
        F.linear(x.bfloat16(), weight.detach().bfloat16().requires_grad_())
        torch.addmm(torch.zeros(8), x, weight.T)  # an addend broadcast over the rows
        F.linear(torch.randn(16), weight)  # a single vector
    assert calls.count == 0


def test_the_route_needs_a_cpu_at_avx512(monkeypatch):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert onednn_products_reason(torch.device("cpu")) is None
    assert onednn_products_reason(torch.device("cuda")) is None
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    if onednn._pointwise_linear() is not None:
        assert "oneDNN" in onednn_products_reason(torch.device("cpu"))


@needs_onednn
@pytest.mark.parametrize("capability", ["AVX512", "AVX2"])
def test_the_engine_routes_fp32_training_forwards_where_the_cpu_takes_it(monkeypatch, onednn_caches_unset, capability):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    calls = Calls(monkeypatch)
    trained = tiny_baseline(dropout=0.0)
    document = trained.tensorize(DOCUMENTS[0])
    engine = Engine(training_config(devices=1, precision="32"))
    with engine.autocast():
        loss = next(iter(trained.model.training_losses(document)))
    loss.backward()
    assert (calls.count > 0) == (capability == "AVX512")  # the encoder's and the scorers' linear layers
    # the caches held on any CPU: torch sends its own bf16 products to oneDNN too
    assert all(os.environ[name] == value for name, value in ONEDNN_CACHE_ENVIRONMENT.items())
    routed = calls.count
    bf16 = Engine(training_config(devices=1, precision="bf16-mixed"))
    with bf16.autocast():
        next(iter(trained.model.training_losses(document)))
    assert calls.count == routed  # bf16 autocast: torch's own reduced-precision path


def test_a_users_cache_setting_stands(monkeypatch, onednn_caches_unset):
    own, unset = ONEDNN_CACHE_ENVIRONMENT  # the user sets the first, not the second
    monkeypatch.setenv(own, str(onednn.ONEDNN_CACHE_CAPACITY + 8))
    bound_onednn_caches()
    assert os.environ[own] == str(onednn.ONEDNN_CACHE_CAPACITY + 8)
    assert os.environ[unset] == ONEDNN_CACHE_ENVIRONMENT[unset]


# Row counts the chunked products are checked at: one row, below an alignment, exactly one, between, a whole chunk,
# a chunk and one row, and several chunks with a remainder.
ROW_COUNTS = (
    1,
    PRODUCT_ROW_ALIGNMENT - 3,
    PRODUCT_ROW_ALIGNMENT,
    PRODUCT_ROW_ALIGNMENT + 5,
    PRODUCT_CHUNK_ROWS,
    PRODUCT_CHUNK_ROWS + 1,
    2 * PRODUCT_CHUNK_ROWS + PRODUCT_ROW_ALIGNMENT + 7,
)
# What a chunk's product may have as its rows: a whole chunk, or a multiple of the alignment below it.
CHUNK_SHAPES = {PRODUCT_CHUNK_ROWS} | set(range(PRODUCT_ROW_ALIGNMENT, PRODUCT_CHUNK_ROWS, PRODUCT_ROW_ALIGNMENT))


def test_chunks_cover_every_row_once_in_few_shapes():
    padded_seen = set()
    for rows in range(1, 3 * PRODUCT_CHUNK_ROWS + 2):
        chunks = list(onednn._chunk_rows(rows))
        assert [first for first, _, _ in chunks] == list(range(0, rows, PRODUCT_CHUNK_ROWS))
        assert sum(size for _, size, _ in chunks) == rows
        for _, size, padded in chunks:
            assert size <= padded < size + PRODUCT_ROW_ALIGNMENT and padded % PRODUCT_ROW_ALIGNMENT == 0
            padded_seen.add(padded)
    assert padded_seen == CHUNK_SHAPES  # PRODUCT_CHUNK_ROWS / PRODUCT_ROW_ALIGNMENT shapes, whatever the rows


class ProductRows(torch.overrides.TorchFunctionMode):
    """Records the rows of the left operand of each ``linear``, ``addmm`` and ``matmul`` that reaches torch, and the
    columns of each ``matmul``'s right operand (entered outside ``reused_product_shapes``, it sees the chunks'
    products)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[int] = []
        self.columns: list[int] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is F.linear:
            self.rows.append(args[0].reshape(-1, args[0].shape[-1]).shape[0])
        elif func is torch.addmm:
            self.rows.append(args[1].shape[0])
        elif func in onednn._ReusedProductShapes.MATMULS:
            self.rows.append(args[0].shape[0])
            self.columns.append(args[1].shape[-1])
        return func(*args, **(kwargs or {}))


def small_integers(generator: torch.Generator, *shape: int) -> torch.Tensor:
    """bf16 integers in [-3, 3]: their products' sums over 16 terms are integers below 256, which bf16 and fp32 hold
    exactly, so a product computed by any shape, in any order, gives the same bits."""
    return torch.randint(-3, 4, shape, generator=generator).to(torch.bfloat16)


def products(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, added: torch.Tensor) -> list[torch.Tensor]:
    """``x`` ``[M, 16]``: a linear layer over it as ``[1, M, 16]``, with and without a bias, an addmm of a rowwise
    addend and of a bias broadcast over the rows, and the three spellings of a 2-D matmul."""
    return [
        F.linear(x.unsqueeze(0), weight, bias),
        F.linear(x, weight),
        torch.addmm(added, x, weight.T),
        torch.addmm(bias, x, weight.T),
        x @ weight.T,
        torch.matmul(x, weight.T),
        torch.mm(x, weight.T),
    ]


def unchunked_and_chunked(compute):
    """``compute()``'s products without a gradient as torch computes them, then under ``reused_product_shapes`` with
    a ``ProductRows`` recording what reaches torch: (unchunked, chunked, the recorder)."""
    with torch.no_grad():
        expected = compute()
        recorder = ProductRows()
        with recorder, reused_product_shapes():
            chunked = compute()
    return expected, chunked, recorder


@pytest.mark.parametrize("rows", ROW_COUNTS)
def test_chunked_bf16_products_give_the_same_rows_by_products_of_few_shapes(rows):
    generator = torch.Generator().manual_seed(rows)
    x, added = small_integers(generator, rows, 16), small_integers(generator, rows, 8)
    weight, bias = small_integers(generator, 8, 16), small_integers(generator, 8)
    expected, chunked, recorder = unchunked_and_chunked(lambda: products(x, weight, bias, added))
    for want, have in zip(expected, chunked, strict=True):
        assert have.dtype == want.dtype and torch.equal(have, want)
    chunks = len(list(onednn._chunk_rows(rows)))
    assert len(recorder.rows) == len(expected) * chunks and set(recorder.rows) <= CHUNK_SHAPES


@pytest.mark.parametrize("columns", ROW_COUNTS)
def test_chunked_bf16_matmuls_give_the_same_columns_by_products_of_few_shapes(columns):
    """A matmul whose right operand changes with the document (the coarse scorers' spans against spans, ``x @
    spans.T``) computes its columns in chunks of the rows' shapes too: the same values, a few shapes."""
    generator = torch.Generator().manual_seed(columns)
    x, spans = small_integers(generator, 300, 16), small_integers(generator, columns, 16)
    # a transposed view, and a contiguous operand
    expected, chunked, recorder = unchunked_and_chunked(lambda: [x @ spans.T, torch.mm(x, spans.T.contiguous())])
    for want, have in zip(expected, chunked, strict=True):
        assert have.dtype == want.dtype and have.is_contiguous() and torch.equal(have, want)
    chunks = len(list(onednn._chunk_rows(columns)))
    assert recorder.rows == [2 * PRODUCT_ROW_ALIGNMENT] * (2 * chunks) and set(recorder.columns) <= CHUNK_SHAPES


def test_a_batch_of_bf16_matmuls_is_chunked_product_by_product():
    """Several documents' spans side by side (``[G, w, D] @ [G, D, w]``, the baseline's grouped coarse scores): each
    document's product in chunks; a batch ``mm`` refuses as torch does."""
    generator = torch.Generator().manual_seed(3)
    x, other = small_integers(generator, 3, 261, 16), small_integers(generator, 3, 16, 261)
    with torch.no_grad():
        expected = x @ other
        recorder = ProductRows()
        with recorder, reused_product_shapes():
            chunked = x @ other
            with pytest.raises(RuntimeError):
                torch.mm(x, other)
    assert chunked.shape == expected.shape and torch.equal(chunked, expected)
    assert recorder.rows[:3] == [2 * PRODUCT_ROW_ALIGNMENT] * 3 and recorder.columns[:3] == recorder.rows[:3]


def test_a_bf16_product_of_no_rows_is_computed_as_it_is():
    generator = torch.Generator().manual_seed(0)
    x, added = small_integers(generator, 0, 16), small_integers(generator, 0, 8)
    weight, bias = small_integers(generator, 8, 16), small_integers(generator, 8)
    expected, chunked, recorder = unchunked_and_chunked(lambda: products(x, weight, bias, added))
    for want, have in zip(expected, chunked, strict=True):
        assert have.dtype == want.dtype and have.shape == want.shape == (*want.shape[:-1], 8) and not have.numel()
    assert recorder.rows == [0] * len(expected)


def test_under_bf16_autocast_fp32_operands_are_chunked_and_fp32_products_or_gradients_are_not():
    generator = torch.Generator().manual_seed(0)
    x, weight = small_integers(generator, 300, 16).float(), small_integers(generator, 8, 16).float()
    recorder = ProductRows()
    with torch.no_grad(), recorder, reused_product_shapes():
        x @ weight.T  # fp32, no autocast: as it is
        with torch.autocast("cpu", dtype=torch.bfloat16):
            autocast = x @ weight.T  # bf16 under autocast: chunked
    with recorder, reused_product_shapes(), torch.autocast("cpu", dtype=torch.bfloat16):
        F.linear(x, weight.requires_grad_())  # a gradient to compute (training): as it is
    assert recorder.rows == [300, 2 * PRODUCT_ROW_ALIGNMENT, 300]
    assert autocast.dtype == torch.bfloat16 and torch.equal(autocast, (x @ weight.detach().T).bfloat16())


@pytest.fixture
def amx_unknown():
    """``reuses_product_shapes`` reads the CPU and oneDNN's environment once a process: read again in each test."""
    onednn._amx_kernels.cache_clear()
    yield
    onednn._amx_kernels.cache_clear()


@pytest.mark.parametrize(
    ("capability", "amx", "held", "reused"),
    [
        ("AVX512", True, None, True),
        ("AVX512", True, "AVX10_1_512_AMX_FP16", True),
        ("AVX512", True, "AVX512_CORE_BF16", False),  # oneDNN held below AMX: compiling costs little
        ("AVX512", False, None, False),  # AVX-512 BF16 without AMX (the AMD EPYC): the chunks' copies cost more
        ("AVX2", True, None, False),  # torch held below AVX-512: no native bf16
    ],
)
def test_prediction_reuses_product_shapes_on_a_cpu_whose_onednn_uses_amx(
    monkeypatch, amx_unknown, capability, amx, held, reused
):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    for name in onednn.ONEDNN_ISA_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    if held:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", held)
    assert reuses_product_shapes(torch.device("cpu"), torch.bfloat16) is reused
    assert not reuses_product_shapes(torch.device("cpu"), torch.float16)
    assert not reuses_product_shapes(torch.device("cuda"), torch.bfloat16)
    recorder = ProductRows()
    x = torch.ones(300, 16)
    with torch.no_grad(), recorder, prediction_autocast(torch.device("cpu"), torch.bfloat16):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        x @ x.T[:, :8]
    assert recorder.rows == ([2 * PRODUCT_ROW_ALIGNMENT] if reused else [300])


def test_prediction_autocast_computes_in_bf16_within_its_with_only(monkeypatch):
    monkeypatch.setattr(onednn, "_amx_kernels", lambda: True)
    x = torch.ones(300, 16)
    recorder = ProductRows()
    with torch.no_grad(), recorder:
        context = prediction_autocast(torch.device("cpu"), torch.bfloat16)
        assert not torch.is_autocast_enabled("cpu")  # made, not entered: nothing changes yet
        assert (x @ x.T[:, :8]).dtype == torch.float32
        with context:
            assert (x @ x.T[:, :8]).dtype == torch.bfloat16
        assert not torch.is_autocast_enabled("cpu")
        assert (x @ x.T[:, :8]).dtype == torch.float32
    assert recorder.rows == [300, 2 * PRODUCT_ROW_ALIGNMENT, 300]  # the chunks within the with only


def test_a_parameters_prediction_copy_is_made_once_while_its_values_stand():
    layer = torch.nn.Linear(16, 8)
    copy = onednn.cast_once(layer.weight, torch.bfloat16)
    assert copy.dtype == torch.bfloat16 and torch.equal(copy, layer.weight.detach().bfloat16())
    assert onednn.cast_once(layer.weight, torch.bfloat16) is copy  # kept
    with torch.no_grad():
        layer.weight.mul_(2)  # an in-place change (an optimiser's step, a load_state_dict)
    changed = onednn.cast_once(layer.weight, torch.bfloat16)
    assert changed is not copy and torch.equal(changed, layer.weight.detach().bfloat16())
    layer.weight.data = torch.zeros(8, 16)  # new data under the same parameter
    assert not onednn.cast_once(layer.weight, torch.bfloat16).any()
    plain = torch.ones(3)
    assert onednn.cast_once(plain, torch.bfloat16) is not onednn.cast_once(plain, torch.bfloat16)  # not a parameter
    assert onednn.cast_once(None, torch.bfloat16) is None
    assert onednn.cast_once(copy, torch.bfloat16) is copy  # already in the dtype
    key = (id(layer.weight), torch.bfloat16)
    assert key in onednn._PREDICTION_COPIES
    del layer
    assert key not in onednn._PREDICTION_COPIES  # the copy leaves with its parameter


@pytest.mark.parametrize("amx", [False, True])
def test_prediction_autocast_casts_a_linears_parameters_once_to_the_same_values(monkeypatch, amx):
    """A model loaded for prediction records no gradient for its weights, so autocast would cast each of them again at
    every product: within ``prediction_autocast`` a ``linear``'s weight and bias are cast once (the same values, so the
    same products), with or without the AMX chunks; in training (a gradient) autocast casts them as before."""
    monkeypatch.setattr(onednn, "_amx_kernels", lambda: amx)
    torch.manual_seed(0)
    layer, x = torch.nn.Linear(16, 8).requires_grad_(False), torch.randn(300, 16)
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            expected = layer(x)
        with prediction_autocast(torch.device("cpu"), torch.bfloat16):
            first, second = layer(x), layer(x)
    assert first.dtype == torch.bfloat16 and torch.equal(first, expected) and torch.equal(second, expected)
    kept = onednn._PREDICTION_COPIES[(id(layer.weight), torch.bfloat16)][3]
    casts = []
    monkeypatch.setattr(onednn, "cast_once", lambda tensor, dtype: casts.append(tensor) or tensor.to(dtype))
    trained = torch.nn.Linear(16, 8)
    with prediction_autocast(torch.device("cpu"), torch.bfloat16):
        trained(x).float().sum().backward()  # a gradient to compute: autocast's own cast, differentiable
    assert not casts and trained.weight.grad is not None and trained.weight.grad.abs().sum() > 0
    assert onednn._PREDICTION_COPIES[(id(layer.weight), torch.bfloat16)][3] is kept
