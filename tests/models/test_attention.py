"""The encoder's training attention with the cheaper CPU dropout mask (models/attention.py)."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from coref_pipeline.models import attention
from coref_pipeline.models.encoder import SegmentEncoder
from tests.models.tiny import make_document, tiny_config, tiny_encoder, tiny_tensors
from tests.tolerances import assert_reordered_close


def attention_inputs(seed: int = 0) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    query, key, value = (torch.randn(2, 3, 7, 4) for _ in range(3))  # [batch, heads, len, head_dim]
    mask = torch.ones(2, 1, 7, 7, dtype=torch.bool)  # True: attend
    mask[1, :, :, 5:] = False  # the second segment's last two tokens are padding
    module = tiny_encoder().model.encoder.layer[0].attention.self
    return module, query, key, value, mask


@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_the_mask_keeps_each_element_at_the_dropout_rate_to_one_in_65536(rate):
    torch.manual_seed(0)
    keep = attention.keep_mask(torch.Size([1000, 1000]), rate, torch.device("cpu"))
    assert keep.dtype == torch.bool
    # 1M draws: the standard deviation of the kept fraction is under 0.0005.
    assert abs(keep.float().mean().item() - (1 - rate)) < 0.002
    assert attention.mask_scale(rate) == pytest.approx(1 / (1 - round(rate * 65536) / 65536))
    assert attention.keep_mask(torch.Size([3, 5]), 0.0, torch.device("cpu")).all()


def test_the_unfused_path_equals_sdpa_when_nothing_is_dropped():
    module, query, key, value, mask = attention_inputs()
    # A rate under 1/131072 rounds to a mask that keeps everything, but takes the unfused path.
    unfused, _ = attention.attention_forward(module, query, key, value, mask, dropout=1e-9, scaling=0.5)
    fused, _ = sdpa_attention_forward(module, query, key, value, mask, dropout=0.0, scaling=0.5)
    assert unfused.shape == (2, 7, 3, 4)  # [batch, len, heads, head_dim], as HF's functions return
    # Two kernels: q . k over head_dim, then the softmax's sum and p . v over the keys, in other orders.
    length, head_dim = key.shape[2], key.shape[3]
    assert_reordered_close(unfused, fused, head_dim + 2 * length)


def test_dropout_zeroes_probabilities_with_the_drawn_mask_and_rescales_the_rest():
    module, query, key, value, mask = attention_inputs()
    torch.manual_seed(5)
    dropped, _ = attention.attention_forward(module, query, key, value, mask, dropout=0.5, scaling=0.5)
    torch.manual_seed(5)
    keep = attention.keep_mask(torch.Size([2, 3, 7, 7]), 0.5, torch.device("cpu"))
    scores = (query @ key.transpose(2, 3) * 0.5).masked_fill(~mask, torch.finfo(torch.float32).min)
    expected = (torch.softmax(scores, dim=-1) * keep * 2.0) @ value  # [batch, heads, len, head_dim]
    torch.testing.assert_close(dropped, expected.transpose(1, 2), rtol=1e-5, atol=1e-6)
    assert not keep.all() and keep.any()


def test_the_encoder_switches_for_training_only_from_sdpa_and_saves_no_trace(tmp_path):
    encoder = tiny_encoder(seed=3)
    document = tiny_tensors(make_document(num_segments=3), tiny_config())
    encoder.eval()
    before = encoder(document.input_ids, document.attention_mask)
    assert encoder.model.config._attn_implementation == "sdpa"
    assert encoder.use_cpu_attention_dropout()
    assert encoder.model.config._attn_implementation == attention.IMPLEMENTATION
    torch.testing.assert_close(encoder(document.input_ids, document.attention_mask), before)  # eval: sdpa itself
    encoder.train()
    torch.manual_seed(0)
    first = encoder(document.input_ids, document.attention_mask)
    torch.manual_seed(0)
    torch.testing.assert_close(encoder(document.input_ids, document.attention_mask), first)  # same seed, same masks
    assert not torch.allclose(first, before)
    encoder.model.save_pretrained(tmp_path)
    assert attention.IMPLEMENTATION not in json.dumps(json.loads((tmp_path / "config.json").read_text()))
    assert AutoModel.from_pretrained(tmp_path).config._attn_implementation == "sdpa"
    # Another implementation chosen by the user (here eager) is left alone.
    eager = SegmentEncoder(AutoModel.from_config(encoder.model.config, attn_implementation="eager"))
    assert not eager.use_cpu_attention_dropout()
    assert eager.model.config._attn_implementation == "eager"
