"""A segment's training loss, computed once its decisions are made.

For each span that had options (an active entity when it was read), ``-log P(gold options)`` over the
new-entity option (score ``threshold``) and the columns it could choose, each scored ``value + s_m(m)``:
the gold options are the columns of the entities holding an earlier mention of its gold cluster (its most
recent one with ``loss: latest_antecedent``), or the new-entity option when there is none. The decisions
(``decisions.py``) record each span's options as positions in the segment's score passes (``SegmentScores``,
in the graph); ``loss`` gathers them in one indexing and sums the spans' losses.
"""

from __future__ import annotations

import numpy as np
import torch

from coref_pipeline.models.incremental.scoring import SegmentScores, host_tensor


class SegmentLoss:
    """The options of each span that gets a loss: where their scores are (``SegmentScores.flat``), which are gold."""

    def __init__(self) -> None:
        self.positions: list[int] = []  # the span's position among the segment's read spans
        self.options: list[np.ndarray] = []  # its options' positions in ``SegmentScores.flat_scores()``
        self.gold: list[np.ndarray] = []  # which of them are gold (none: the new-entity option is)

    def __len__(self) -> int:
        return len(self.positions)

    def record(self, position: int, options: np.ndarray, gold: np.ndarray) -> None:
        """A span's options (``[options]`` positions in the flat scores) and which are gold (``[options]`` bool)."""
        self.positions.append(position)
        self.options.append(options)
        self.gold.append(gold)

    def loss(self, scores: SegmentScores, mention_scores: torch.Tensor, threshold: float) -> torch.Tensor:
        """The summed loss of the recorded spans (``mention_scores`` ``[n]``: the read spans'): a scalar in the
        segment's graph."""
        count = len(self.positions)
        width = max(len(options) for options in self.options)
        padding = scores.size  # flat_scores' last element: -inf
        # One host array, moved once: each span's position, its options' positions (padded), its gold flags.
        host = np.zeros((count, 1 + 2 * width + 1), dtype=np.int64)
        host[:, 0] = self.positions
        host[:, 1 : 1 + width] = padding
        for row, (options, gold) in enumerate(zip(self.options, self.gold, strict=True)):
            host[row, 1 : 1 + len(options)] = options
            host[row, 2 + width : 2 + width + len(gold)] = gold
            host[row, 1 + width] = not gold.any()  # the new-entity option
        moved = host_tensor(host, mention_scores.device)  # [count, 2 + 2 * width]
        options = scores.flat_scores()[moved[:, 1 : 1 + width]]  # [count, width]
        options = options + mention_scores.index_select(0, moved[:, 0]).unsqueeze(1)  # padding stays -inf
        logits = torch.cat([options.new_full((count, 1), threshold), options], dim=1)  # [count, 1 + width]
        gold = moved[:, 1 + width :].bool()  # [count, 1 + width]
        gold_logits = logits.masked_fill(~gold, float("-inf"))
        return (torch.logsumexp(logits, 1) - torch.logsumexp(gold_logits, 1)).sum()
