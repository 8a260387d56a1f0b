"""The training loss of a window of segments, computed once their decisions are made.

For each span that had options (an active entity when it was read), ``-log P(gold options)`` over the
new-entity option (score ``threshold``) and the columns it could choose, each scored ``value + s_m(m)``:
the gold options are the columns of the entities holding an earlier mention of its gold cluster (its most
recent one with ``loss: latest_antecedent``), or the new-entity option when there is none. The decisions
(``decisions.py``) record each span's options as positions in its segment's score passes (``SegmentScores``,
in the graph, ``SegmentLoss``); ``window_loss`` gathers the options of every segment of a window (the segments
backpropagated together) in one indexing and sums the spans' losses: one loss computation a window, not one a
segment.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from coref_pipeline.models.incremental.scoring import SegmentScores, host_tensor


class SegmentLoss:
    """The options of each span of one segment that gets a loss: where their scores are
    (``SegmentScores.flat``), which are gold; with the segment's passes (``scores``) and its read spans' mention
    scores ``[n]`` (in the graph), gathered from at the window's end."""

    def __init__(self, scores: SegmentScores, mention_scores: torch.Tensor) -> None:
        self.scores = scores
        self.mention_scores = mention_scores  # [n]
        self.positions: list[int] = []  # the span's position among the segment's read spans
        self.options: list[np.ndarray] = []  # its options' positions among the segment's scores (``flat``)
        self.gold: list[np.ndarray] = []  # which of them are gold (none: the new-entity option is)

    def __len__(self) -> int:
        return len(self.positions)

    def record(self, position: int, options: np.ndarray, gold: np.ndarray) -> None:
        """A span's options (``[options]`` positions in the flat scores) and which are gold (``[options]`` bool)."""
        self.positions.append(position)
        self.options.append(options)
        self.gold.append(gold)


def window_loss(segments: Sequence[SegmentLoss], threshold: float) -> torch.Tensor:
    """The summed loss of the spans the ``segments`` recorded (each with at least one): a scalar in their graph.

    Every segment's scores and mention scores are concatenated (one tensor each), each span's options are
    offset to its segment's place in them, and the log-sum-exps are taken over one padded ``[spans, options]``
    matrix: the same terms as a loss per segment, summed in another order."""
    count = sum(len(segment) for segment in segments)
    width = max(len(options) for segment in segments for options in segment.options)
    parts = [part for segment in segments for part in segment.scores.parts]
    padding = sum(part.shape[0] for part in parts)  # the flat scores' last element: -inf
    # One host array, moved once: each span's position, its options' positions (padded), its gold flags.
    host = np.zeros((count, 1 + 2 * width + 1), dtype=np.int64)
    host[:, 1 : 1 + width] = padding
    row, flat_offset, span_offset = 0, 0, 0
    for segment in segments:
        for position, options, gold in zip(segment.positions, segment.options, segment.gold, strict=True):
            host[row, 0] = span_offset + position
            host[row, 1 : 1 + len(options)] = flat_offset + options
            host[row, 2 + width : 2 + width + len(gold)] = gold
            host[row, 1 + width] = not gold.any()  # the new-entity option
            row += 1
        flat_offset += segment.scores.size
        span_offset += segment.mention_scores.shape[0]
    device = segments[0].mention_scores.device
    moved = host_tensor(host, device)  # [count, 2 + 2 * width]
    flat = torch.cat([*parts, torch.full((1,), float("-inf"), device=device)])  # [padding + 1]
    mention_scores = [segment.mention_scores for segment in segments]
    mention_scores = torch.cat(mention_scores) if len(mention_scores) > 1 else mention_scores[0]  # [spans]
    options = flat[moved[:, 1 : 1 + width]]  # [count, width]
    options = options + mention_scores.index_select(0, moved[:, 0]).unsqueeze(1)  # padding stays -inf
    logits = torch.cat([options.new_full((count, 1), threshold), options], dim=1)  # [count, 1 + width]
    gold = moved[:, 1 + width :].bool()  # [count, 1 + width]
    gold_logits = logits.masked_fill(~gold, float("-inf"))
    return (torch.logsumexp(logits, 1) - torch.logsumexp(gold_logits, 1)).sum()
