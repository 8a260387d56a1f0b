"""fp32 training products on oneDNN: the same values and gradients as torch's own path, only where a gradient is
computed, and only where the engine decides it (a CPU whose AVX-512 kernels torch runs)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from coref_pipeline.runtime import onednn
from coref_pipeline.runtime.onednn import (
    ONEDNN_CACHE_ENVIRONMENT,
    bound_onednn_caches,
    onednn_products,
    onednn_products_reason,
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
