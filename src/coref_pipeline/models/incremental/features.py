"""The pair features phi(m, e) of the incremental model's spans against its scoring columns (``pair_features``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from coref_pipeline.models.config import IncrementalConfig
from coref_pipeline.models.document import DocumentTensors
from coref_pipeline.models.incremental.memory import Span
from coref_pipeline.models.scorers import PairScorer
from coref_pipeline.models.spans import bucket_distance


@dataclass
class PairFeatures:
    """The pair features of one document's spans against scoring columns (``pair_features``).

    Each column is measured from its anchor mention (``EntityMemory.anchor``). ``paper``: the
    distance bucket of the subtokens between the two starts, the speaker slot zeros and the
    segment distance 0. ``baseline`` (``speaker_ids`` given): what the baseline computes with the
    anchor as the antecedent: the distance in kept spans (``rank_of_span``, filled as the
    document's spans are kept), same speaker, and the segment distance up to ``max_segment_distance``.
    """

    genre: int
    speaker_ids: torch.Tensor | None = None  # [num_subtokens]; None: the paper's features
    segment_of_token: torch.Tensor | None = None  # [num_subtokens]
    max_segment_distance: int = 0
    rank_of_span: dict[Span, int] = field(default_factory=dict)

    @classmethod
    def of_document(cls, document: DocumentTensors, config: IncrementalConfig) -> PairFeatures:
        if config.pair_features == "paper":
            return cls(document.genre)
        return cls(document.genre, document.speaker_ids, document.segment_of_token, config.max_training_sentences - 1)

    def positions(self, spans: Sequence[Span]) -> list[tuple[int, int]]:
        """Each span's start and the position its distance counts from: its start, or its rank."""
        if self.speaker_ids is None:
            return [(start, start) for start, _ in spans]
        return [(span[0], self.rank_of_span[span]) for span in spans]

    def locate(self, spans: Sequence[Span], device: torch.device) -> torch.Tensor:
        """``positions`` as a tensor: ``[len(spans), 2]``."""
        return torch.tensor(self.positions(spans), dtype=torch.long, device=device).reshape(-1, 2)

    def __call__(self, scorer: PairScorer, spans: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor | None:
        """phi for ``spans`` ``[k, 2]`` against ``anchors`` ``[k or 1, C, 2]`` (both from ``locate``): ``[k, C, F]``."""
        spans, anchors = torch.broadcast_tensors(spans.unsqueeze(1), anchors)  # [k, C, 2] each
        starts, anchor_starts = spans[..., 0], anchors[..., 0]  # [k, C]
        if self.speaker_ids is None:
            distance = (starts - anchor_starts).abs()  # [k, C]
            return scorer.features(None, self.genre, bucket_distance(distance), torch.zeros_like(distance))
        same_speaker = self.speaker_ids[starts] == self.speaker_ids[anchor_starts]  # [k, C]
        segment_distance = (self.segment_of_token[starts] - self.segment_of_token[anchor_starts]).clamp(
            0, self.max_segment_distance
        )  # [k, C]
        distance = (spans[..., 1] - anchors[..., 1]).clamp(min=0)  # [k, C]: kept spans between them
        return scorer.features(same_speaker, self.genre, bucket_distance(distance), segment_distance)
