"""SpanBERT's two prediction heads over an encoder's outputs, both decoding through its input embeddings.

* The masked-LM head: BERT's transform (Linear -> GeLU -> LayerNorm) and a decoder tied to the input
  embedding matrix, with its own bias.
* The span boundary objective (Joshi et al. 2020, section 3.2): each masked subtoken x_i of a masked span
  (s, e) is predicted from the encoder's outputs at the span's two outside boundaries, x_{s-1} and x_{e+1},
  and a relative position embedding p_{i-s+1} (200 dimensions):
  ``h0 = [x_{s-1}; x_{e+1}; p_{i-s+1}]``, ``h1 = LayerNorm(GeLU(W1 h0))``, ``y_i = LayerNorm(GeLU(W2 h1))``,
  decoded through the same tied embedding matrix, with its own bias.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import torch
from torch import nn

from coref_pipeline.pretraining.masking import MaskedSpan

SBO_POSITION_SIZE = 200  # the relative position embedding's width (the paper's)


class HeadTransform(nn.Sequential):
    """Linear -> GeLU -> LayerNorm, BERT's prediction-head transform (and each of SBO's two layers); named as
    BERT names them (``dense``, ``LayerNorm``), so that its LayerNorm is left out of the weight decay."""

    def __init__(self, in_features: int, hidden: int, layer_norm_eps: float = 1e-12) -> None:
        super().__init__(
            OrderedDict(
                dense=nn.Linear(in_features, hidden),
                activation=nn.GELU(),
                LayerNorm=nn.LayerNorm(hidden, eps=layer_norm_eps),
            )
        )


class TiedDecoder(nn.Module):
    """Logits over the vocabulary through the input embedding matrix (shared, not copied) and a bias of its own."""

    def __init__(self, embeddings: nn.Embedding) -> None:
        super().__init__()
        self.embeddings = [embeddings]  # a list: the encoder owns the weight, this module does not register it
        self.bias = nn.Parameter(torch.zeros(embeddings.num_embeddings))

    @property
    def weight(self) -> torch.Tensor:
        return self.embeddings[0].weight

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden @ self.weight.t() + self.bias  # [m, H] -> [m, V]


class MaskedLMHead(nn.Module):
    """BERT's masked-LM head: the transform, then the tied decoder."""

    def __init__(self, embeddings: nn.Embedding, hidden: int, layer_norm_eps: float = 1e-12) -> None:
        super().__init__()
        self.transform = HeadTransform(hidden, hidden, layer_norm_eps)
        self.decoder = TiedDecoder(embeddings)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(hidden))  # [m, H] -> [m, V]


class SpanBoundaryHead(nn.Module):
    """The span boundary objective's predictor: two layers over [x_{s-1}; x_{e+1}; p_{i-s+1}], the tied decoder."""

    def __init__(
        self, embeddings: nn.Embedding, hidden: int, max_span_subtokens: int, layer_norm_eps: float = 1e-12
    ) -> None:
        super().__init__()
        self.positions = nn.Embedding(max_span_subtokens, SBO_POSITION_SIZE)
        self.layers = nn.Sequential(
            HeadTransform(2 * hidden + SBO_POSITION_SIZE, hidden, layer_norm_eps),
            HeadTransform(hidden, hidden, layer_norm_eps),
        )
        self.decoder = TiedDecoder(embeddings)

    def inputs(self, hidden: torch.Tensor, targets: SpanTargets) -> torch.Tensor:
        """[x_{s-1}; x_{e+1}; p_{i-s+1}] for each target: ``hidden`` [n, H] -> [m, 2H + 200]."""
        return torch.cat([hidden[targets.left], hidden[targets.right], self.positions(targets.offset)], dim=-1)

    def forward(self, hidden: torch.Tensor, targets: SpanTargets) -> torch.Tensor:
        return self.decoder(self.layers(self.inputs(hidden, targets)))  # [m, V]


class SpanTargets:
    """The span boundary objective's targets of one segment: for each predicted subtoken i of a span (s, e),
    its position, the boundaries s - 1 and e + 1 and its offset i - s (0-based: p_{i-s+1} in the paper)."""

    def __init__(self, position: torch.Tensor, left: torch.Tensor, right: torch.Tensor, offset: torch.Tensor) -> None:
        self.position, self.left, self.right, self.offset = position, left, right, offset

    @classmethod
    def of(
        cls, spans: Sequence[MaskedSpan], max_span_subtokens: int, device: torch.device | None = None
    ) -> SpanTargets:
        """The targets of ``spans``; a span's subtokens past ``max_span_subtokens`` are left to the masked LM
        (a span is never at a segment's edge: the special tokens there are not masked, so s - 1 and e + 1 exist)."""
        rows = [
            (i, span.start - 1, span.end + 1, i - span.start)
            for span in spans
            for i in range(span.start, min(span.end, span.start + max_span_subtokens - 1) + 1)
        ]
        columns = list(zip(*rows, strict=True)) if rows else [[], [], [], []]
        return cls(*(torch.tensor(column, dtype=torch.long, device=device) for column in columns))
