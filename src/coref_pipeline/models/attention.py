"""The encoder's self-attention with a cheaper dropout mask on a CPU (an HF attention implementation).

HF BERT-family models compute attention through ``torch.nn.functional.scaled_dot_product_attention``
("sdpa"). With a dropout above 0 (BERT trains with 0.1) a CPU cannot use torch's fused kernel,
and its unfused path draws the mask with ``bernoulli_``, a third of that path's time. Here,
in training on a CPU, the attention is computed unfused with a mask of 16-bit uniform integers
drawn four to a 64-bit word, which is about 1.8x faster forward and backward (docs/benchmarks.md).
The dropout rate is kept to 1/65,536 (``round(65536 p) / 65536``: 0.100006 for 0.1).
Everything else (evaluation, no dropout, any other device) is HF's own "sdpa" function, so a GPU
keeps torch's fused kernels with their own dropout.
"""

from __future__ import annotations

import torch

from coref_pipeline.models.layers import uniform_integers

IMPLEMENTATION = "coref_pipeline_sdpa"  # its name in HF's AttentionInterface
_MASK_LEVELS = 1 << 16  # the mask's uniform integers: the dropout rate's resolution


def keep_mask(shape: torch.Size, rate: float, device: torch.device) -> torch.Tensor:
    """A bool mask that keeps each element with probability ``1 - round(65536 rate) / 65536``."""
    uniform = uniform_integers(shape, torch.int16, device)  # over [-32768, 32767]
    return uniform >= round(rate * _MASK_LEVELS) - _MASK_LEVELS // 2


def mask_scale(rate: float) -> float:
    """What a kept probability is multiplied by (inverted dropout at the mask's rate)."""
    return _MASK_LEVELS / (_MASK_LEVELS - round(rate * _MASK_LEVELS))


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """HF's attention-function signature: ``[batch, heads, len, head_dim]`` in, ``[batch, len, heads, head_dim]``
    out."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if not dropout or query.device.type != "cpu" or key.shape[1] != query.shape[1]:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    scores = torch.matmul(query, key.transpose(2, 3)) * scale  # [batch, heads, len, len]
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:  # True: attend
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    probabilities = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)  # [batch, heads, len, len]
    keep = keep_mask(probabilities.shape, dropout, probabilities.device)
    probabilities = probabilities * keep * mask_scale(dropout)
    return torch.matmul(probabilities, value).transpose(1, 2).contiguous(), None


def register() -> None:
    """Make :data:`IMPLEMENTATION` known to HF (the attention function and sdpa's mask format); idempotent."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(IMPLEMENTATION, attention_forward)
    AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)
