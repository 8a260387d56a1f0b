"""The pair features phi(m, e) of the incremental model's spans against its scoring columns (``pair_features``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from coref_pipeline.models.config import IncrementalConfig
from coref_pipeline.models.document import DocumentTensors
from coref_pipeline.models.incremental.memory import Span
from coref_pipeline.models.scorers import FeatureTable, PairScorer
from coref_pipeline.models.spans import bucket_distance


@dataclass
class PairFeatures:
    """The pair features of one document's spans against scoring columns (``pair_features``).

    Each column is measured from its anchor mention (``EntityMemory.anchor``). ``paper``: the
    distance bucket of the subtokens between the two starts (``distance_between: midpoints``: between the two
    midpoints, truncated, 0 when the span's comes first, as the 2020 code measures it), the speaker slot zeros
    and the segment distance 0. ``baseline`` (``speaker_ids`` given): what the baseline computes with the
    anchor as the antecedent: the distance in kept spans (``rank_of_span``, filled as the
    document's spans are kept), same speaker, and the segment distance up to ``max_segment_distance``.
    """

    genre: int
    speaker_ids: torch.Tensor | None = None  # [num_subtokens]; None: the paper's features
    segment_of_token: torch.Tensor | None = None  # [num_subtokens]
    max_segment_distance: int = 0
    rank_of_span: dict[Span, int] = field(default_factory=dict)
    midpoints: bool = False  # the paper's features: the distance between midpoints (twice each, as integers)
    # On the host, read once: speaker_ids and segment_of_token ([2, num_subtokens]), and bucket_distance's value
    # of each distance up to the largest met (extended as needed).
    host_tokens: np.ndarray | None = field(default=None, repr=False)
    buckets: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False)

    @classmethod
    def of_document(cls, document: DocumentTensors, config: IncrementalConfig) -> PairFeatures:
        if config.pair_features == "paper":
            return cls(document.genre, midpoints=config.distance_between == "midpoints")
        return cls(document.genre, document.speaker_ids, document.segment_of_token, config.max_training_sentences - 1)

    def positions(self, spans: Sequence[Span]) -> list[tuple[int, int]]:
        """Each span's start and the position its distance counts from: its start, or its rank (with the paper's
        features and ``midpoints``: twice its midpoint, both)."""
        if self.speaker_ids is None:
            if self.midpoints:
                return [(start + end, start + end) for start, end in spans]
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
            distance = self.paper_distance(starts - anchor_starts)  # [k, C]
            return scorer.features(None, self.genre, bucket_distance(distance), torch.zeros_like(distance))
        same_speaker = self.speaker_ids[starts] == self.speaker_ids[anchor_starts]  # [k, C]
        segment_distance = (self.segment_of_token[starts] - self.segment_of_token[anchor_starts]).clamp(
            0, self.max_segment_distance
        )  # [k, C]
        distance = (spans[..., 1] - anchors[..., 1]).clamp(min=0)  # [k, C]: kept spans between them
        return scorer.features(same_speaker, self.genre, bucket_distance(distance), segment_distance)

    def paper_distance(self, differences: Any) -> Any:
        """The paper's features' distance from ``positions`` differences (tensor or array, span minus anchor): their
        absolute value (starts), or half of them rounded down and 0 below (twice the midpoints: the 2020 code's
        ``int()`` of the float offset, whose negatives bucket_distance clamps to 0)."""
        if not self.midpoints:
            return differences.abs() if isinstance(differences, torch.Tensor) else np.abs(differences)
        if isinstance(differences, torch.Tensor):
            return differences.clamp(min=0) // 2
        return np.maximum(differences, 0) // 2

    def bucket(self, distances: np.ndarray) -> np.ndarray:
        """``bucket_distance`` of non-negative distances on the host: its own values, tabled once per document."""
        needed = int(distances.max(initial=0)) + 1
        if needed > len(self.buckets):
            size = max(needed, 2 * len(self.buckets), 1024)
            self.buckets = bucket_distance(torch.arange(size, device=torch.device("cpu"))).numpy()
        return self.buckets[distances]

    def indices(self, spans: np.ndarray, anchors: np.ndarray) -> np.ndarray:
        """The feature indices of pairs, computed on the host (integers: the values ``__call__`` computes on the
        device): ``spans`` and ``anchors`` ``[P, 2]`` (``positions``) -> ``[3, P]``: same speaker, distance
        bucket and segment distance (with the paper's features 0, the bucket of the subtokens between the starts,
        0)."""
        if self.speaker_ids is None:
            zeros = np.zeros(len(spans), dtype=np.int64)
            return np.stack([zeros, self.bucket(self.paper_distance(spans[:, 0] - anchors[:, 0])), zeros])
        if self.host_tokens is None:
            self.host_tokens = torch.stack([self.speaker_ids, self.segment_of_token]).cpu().numpy()
        speakers, segments = self.host_tokens
        same_speaker = speakers[spans[:, 0]] == speakers[anchors[:, 0]]
        segment_distance = np.clip(segments[spans[:, 0]] - segments[anchors[:, 0]], 0, self.max_segment_distance)
        distance = np.maximum(spans[:, 1] - anchors[:, 1], 0)  # kept spans between them
        return np.stack([same_speaker.astype(np.int64), self.bucket(distance), segment_distance])

    def table_rows(self, table: FeatureTable, indices: np.ndarray) -> np.ndarray:
        """The rows of ``table`` (``PairScorer.feature_table``, made with ``speakers`` as these features have
        them) that phi of pairs concatenates, from their ``indices`` ``[3, P]`` (``indices``): ``[features used,
        P]``, on the host (the genre's row for every pair; the zero row in the speaker slot without speakers)."""
        count = indices.shape[1]
        speaker = indices[0] if table.speakers else 0
        columns = {"speaker": speaker, "genre": self.genre, "distance": indices[1], "segment_distance": indices[2]}
        rows = [first + np.broadcast_to(columns[name], (count,)) for name, first in table.firsts]
        return np.stack(rows).astype(np.int64, copy=False)  # [features used, P]
