"""A segment's scores: each read span against the columns it may choose, in a few batched passes.

The decisions (``decisions.py``) read these scores on the host, span by span; the passes that compute them
are batched over the whole segment, so a segment issues a bounded number of operator calls and host reads
whatever its number of spans:

1. *Coarse pass.* The coarse bilinear term of every read span against every *static* row of the segment's
   ``SegmentTable`` (the base rows and the read spans themselves: every column the segment can hold but the
   versions its updates make), read back with the mention scores (and the coarse floors) in one transfer.
2. *Static pass.* The fine FFNN over the pairs the decisions will read: each span against every scored base row
   and every earlier read span, or, with ``max_top_entities`` K, its K + margin best of those by coarse score
   (in training its gold ones first; the margin ``PREFILTER_MARGIN`` in training, ``INFERENCE_PREFILTER_MARGIN``
   at inference); at inference with ``min_coarse_score`` only the pairs above the floor. One pass, read back in
   one transfer.
3. *Version pass* (scored entity representations only): each update's new representation against the
   segment's later spans, once per update (the update network's output is known only once the span joined).
4. *Missing pairs* (K only): a span may choose a static column its pass did not score (the next in line when
   better ones left: superseded, dropped slots). They are scored in rounds, each also scoring every later span's
   next best columns, twice as many each round, so that a segment has at most about log2(its columns / K) rounds.

In training every pass runs with gradients: the window's loss (``loss.py``) gathers the options each span had
from the passes' outputs (``flat``). Each value is what scoring that pair alone gives, to float rounding: the
fine FFNN's GEMMs take other shapes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np
import torch

from coref_pipeline.models.incremental.features import PairFeatures
from coref_pipeline.models.incremental.gold import GoldAntecedents
from coref_pipeline.models.incremental.memory import EntityMemory, SegmentTable, Span
from coref_pipeline.models.scorers import as_dtype

if TYPE_CHECKING:
    from coref_pipeline.models.config import IncrementalConfig
    from coref_pipeline.models.scorers import FirstLayerParts, PairScorer


class ScoringModel(Protocol):
    """What a segment's passes and decisions read of the model (``IncrementalCorefModel`` is one): its
    configuration, its pair scorer and its entity rules; declared here so that this package's modules do not
    import the model that imports them."""

    config: IncrementalConfig
    pair_scorer: PairScorer

    @property
    def uses_coarse(self) -> bool: ...

    def may_start_entity(self, mention_score: float) -> bool: ...

    def update_weight(self, entity: torch.Tensor, mention: torch.Tensor, size: int) -> torch.Tensor | float: ...


# Most elements of one fine-FFNN input ([pairs, span_dim + ffnn]) per chunk of pairs at inference: 2**23 floats,
# 32 MB in fp32, so that inference memory does not grow with the spans times the columns. In training the
# graph keeps every pair's activations anyway: one pass.
BASE_SCORE_CHUNK_ELEMENTS = 2**23
# With max_top_entities K, the static pass scores each span's K best columns by coarse score and this share
# more: columns leave the running during the segment (superseded, dropped slots), and the next in line are
# then already scored. In training (the pairs' activations kept for backward) a tenth more; at inference half
# as many more, which leaves few rounds for missing pairs (each scores every later span's next best twice over):
# on LitBank test 2 rounds instead of 37, the incremental model's prediction 0.8x the time at the same clusters
# (docs/benchmarks.md, "Throughput of `predict` on a CPU").
PREFILTER_MARGIN = 0.1
INFERENCE_PREFILTER_MARGIN = 0.5
CPU = torch.device("cpu")


def to_host(tensor: torch.Tensor) -> np.ndarray:
    """A tensor's values on the host: the one way a segment's scores are read back (one transfer; no operator call
    for what is not needed: a detach without a graph, a copy from the CPU)."""
    if tensor.requires_grad:
        tensor = tensor.detach()
    return (tensor if tensor.device.type == "cpu" else tensor.cpu()).numpy()


def host_tensor(values: np.ndarray | Sequence, device: torch.device, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """Host values as a tensor on ``device``: built on the CPU, whatever the default device, then moved (on the CPU,
    no move)."""
    tensor = torch.as_tensor(np.asarray(values), dtype=dtype, device=CPU)
    return tensor if device.type == "cpu" else tensor.to(device)


class ScoredTables(NamedTuple):
    """The tensors a segment's fine-FFNN passes gather rows of: the read spans' embeddings ``[n, D]`` (the
    targets) and target projections ``[n, ffnn]``, the static rows' embeddings ``[B + n, D]`` and candidate
    projections ``[B + n, ffnn]``."""

    targets: torch.Tensor
    target_projections: torch.Tensor
    static_embeddings: torch.Tensor
    static_projections: torch.Tensor


class SegmentScores:
    """What a segment's decisions read, on the host, and the tensors the loss gathers from.

    Host arrays over ``[read spans, table.width]`` (the segment's table rows: static, then versions):
    ``coarse`` (the pre-filter's ranking score: the bilinear term plus the row's prior; only with
    ``max_top_entities`` or a coarse floor), ``value`` (the column's score for the span: the fine FFNN,
    plus with ``score: calibrated`` the prior and the bilinear term; NaN where not computed) and ``flat``
    (the value's position among the segment's scores, ``parts`` concatenated; -1 where not computed).
    """

    def __init__(
        self,
        model: ScoringModel,
        memory: EntityMemory,
        table: SegmentTable,
        spans: Sequence[Span],
        embeddings: torch.Tensor,
        target_projections: torch.Tensor,
        sources: torch.Tensor | None,
        mention_scores: torch.Tensor,
        features: PairFeatures,
        weights: FirstLayerParts,
        floors: torch.Tensor | None = None,
    ) -> None:
        """``spans`` (global offsets), ``embeddings`` ``[n, D]``, ``target_projections`` ``[n, ffnn]``,
        ``sources`` ``[n, D]`` (the coarse projection, None without it), ``mention_scores`` ``[n]``: the
        segment's read spans; ``floors`` ``[n]``: ``coarse_floors`` (inference with ``min_coarse_score``)."""
        config = model.config
        self.model = model
        self.table = table
        self.features = features
        self.weights = weights
        # phi's embeddings as one table (one lookup a pass); in the graph in training
        self.feature_table = model.pair_scorer.feature_table(features.speaker_ids is not None)
        self.sources = sources
        self.device = embeddings.device
        self.calibrated = config.score == "calibrated"
        self.limit = config.max_top_entities
        n, num_base = len(spans), table.num_base
        # Positions (PairFeatures.positions) of the read spans and of the static rows' anchors, on the host.
        self.located_host = np.array(features.positions(spans), dtype=np.int64).reshape(-1, 2)  # [n, 2]
        base_anchors = features.positions([memory.anchor(column_id) for column_id in memory.base_ids])
        self.static_anchors = np.concatenate([np.array(base_anchors, dtype=np.int64).reshape(-1, 2), self.located_host])
        self.static_embeddings, self.static_projections, self.static_priors = table.static()  # [B + n, .]
        # What the fine FFNN gathers per pair, in the dtype it multiplies in (cast once per segment: without a graph
        # the same values as each pair's row cast; in training the tensors themselves, their gradients as before).
        dtype = model.pair_scorer.scoring_dtype(embeddings)
        self.scored = ScoredTables(embeddings, target_projections, self.static_embeddings, self.static_projections)
        if not torch.is_grad_enabled() and dtype != embeddings.dtype:
            self.weights = model.pair_scorer.first_layer_parts(dtype)  # ``weights`` in ``dtype``, without a graph
            self.scored = ScoredTables(*(as_dtype(tensor, dtype) for tensor in self.scored))
        self.coarse_scores = None  # [n, B + n]: the bilinear term + each row's prior (the coarse score)
        if model.uses_coarse:
            with torch.set_grad_enabled(torch.is_grad_enabled() and self.calibrated):  # with the calibrated score
                with model.pair_scorer.inference_autocast(sources):  # where the fine FFNN computes
                    # the static rows as the fine FFNN reads them (in bf16 at inference: cast once, above)
                    bilinear = as_dtype(sources @ self.scored.static_embeddings.T, torch.float)  # [n, B + n]
                self.coarse_scores = bilinear + as_dtype(self.static_priors, torch.float)
        # 1. The mention scores, the floors and the coarse scores in one read.
        ranks = self.limit is not None or floors is not None
        read = [as_dtype(mention_scores.detach(), torch.float)] + ([floors] if floors is not None else [])
        if ranks:
            read.append(self.coarse_scores.detach().reshape(-1))
        values = to_host(torch.cat(read)) if n else np.zeros(0, dtype=np.float32)
        self.mention_scores = values[:n]  # [n]
        self.floors = values[n : 2 * n] if floors is not None else None  # [n]
        width = table.width
        self.coarse = None  # [n, width]
        if ranks:
            self.coarse = np.full((n, width), -np.inf, dtype=np.float32)
            self.coarse[:, : table.num_static] = values[len(values) - n * table.num_static :].reshape(
                n, table.num_static
            )
        self.value = np.full((n, width), np.nan, dtype=np.float32)
        self.flat = np.full((n, width), -1, dtype=np.int64)
        self.parts: list[torch.Tensor] = []  # each pass's values, in the graph in training
        self.size = 0  # elements in ``parts``
        self.rounds = 0  # passes for missing pairs
        self.scored_base = np.array(
            [memory.is_scored(column_id) for column_id in memory.base_ids], dtype=bool
        )  # [B]: the base rows that are ever scored
        self.num_base = num_base
        # [n] (inference with a coarse floor, from the static pass): whether a span has a static column it may
        # choose above its floor. A span without one has no option while the segment holds no version.
        self.may_choose: np.ndarray | None = None

    # ------------------------------------------------------------------ passes
    def _record(self, positions: np.ndarray, rows: np.ndarray, scores: torch.Tensor, host: np.ndarray) -> None:
        """Keep a pass's ``scores`` ``[P]`` (values ``host``) for the pairs ``(positions, rows)``."""
        self.value[positions, rows] = host
        self.flat[positions, rows] = self.size + np.arange(len(positions))
        self.parts.append(scores)
        self.size += len(positions)

    def feature_rows(self, indices: np.ndarray) -> np.ndarray:
        """The feature table's rows of pairs from their feature ``indices`` ``[3, P]``, on the host: ``[f, P]``
        (``f`` the features used; none without features)."""
        if self.feature_table is None:
            return indices[:0]
        return self.features.table_rows(self.feature_table, indices)

    def pair_features(self, rows: torch.Tensor) -> torch.Tensor | None:
        """phi of pairs from their rows of the feature table (``PairFeatures.table_rows``, ``[features used, P]``,
        on the device): ``[P, 1, F]``; None without features."""
        if self.feature_table is None:
            return None
        return self.model.pair_scorer.table_features(self.feature_table, rows.T)

    def _static_values(self, positions: torch.Tensor, rows: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """The values of the pairs (read span ``positions`` ``[P]``, static ``rows`` ``[P]``, their feature
        table rows ``[features used, P]``): ``[P]``."""
        scorer = self.model.pair_scorer
        total = positions.shape[0]
        width = self.static_embeddings.shape[1] + self.static_projections.shape[1]
        step = total if torch.is_grad_enabled() else max(1, BASE_SCORE_CHUNK_ELEMENTS // max(1, width))
        chunks = []
        for first in range(0, total, step):
            span_rows, table_rows = positions[first : first + step], rows[first : first + step]  # [p] each
            chunks.append(
                scorer.scores(
                    self.scored.targets.index_select(0, span_rows),  # [p, D]: each pair its own target
                    self.scored.static_embeddings,
                    table_rows.unsqueeze(1),  # [p, 1]
                    self.pair_features(features[:, first : first + step]),  # [p, 1, F]
                    candidate_projection=self.scored.static_projections,
                    parts=self.weights,
                    target_projection=self.scored.target_projections.index_select(0, span_rows),
                ).squeeze(1)
            )
        fine = torch.cat(chunks) if len(chunks) > 1 else chunks[0]  # [P]
        if self.calibrated:  # the baseline's s_m(j) and coarse terms
            fine = fine + self.coarse_scores.reshape(-1).index_select(0, positions * self.table.num_static + rows)
        return fine

    def score_static(self, positions: np.ndarray, rows: np.ndarray) -> None:
        """Score the pairs (read span ``positions``, static ``rows``) in one pass, read back in one transfer (their
        feature indices computed on the host and moved with them)."""
        if not len(positions):
            return
        indices = self.features.indices(self.located_host[positions], self.static_anchors[rows])  # [3, P]
        features = self.feature_rows(indices)  # [f, P]
        pairs = host_tensor(np.concatenate([np.stack([positions, rows]), features]), self.device)  # [2 + f, P]
        scores = self._static_values(pairs[0], pairs[1], pairs[2:])  # [P]
        self._record(positions, rows, scores, to_host(scores))

    def static_pass(self, memory: EntityMemory, spans: Sequence[Span], gold: GoldAntecedents | None) -> None:
        """2. Score the static pairs the decisions will read (module docstring)."""
        n = len(spans)
        if not n:
            return
        possible = self.potential()  # [n, B + n]
        potential = possible  # narrowed below to the pairs scored
        if self.limit is not None:
            scored = self.scored_per_span(gold)
            if scored < self.table.num_static:
                # Each span's gold columns (training: the decisions require them, however many), in training every
                # earlier span too (a span that joins a gold entity in the segment becomes one of its gold columns;
                # negative sampling keeps the spans few), and its best K + margin others by coarse score.
                chosen = self.gold_mask(memory, spans, gold, 0) & possible  # [n, B + n]
                if gold is not None:
                    chosen[:, self.num_base :] |= np.tri(n, n, -1, dtype=bool)
                ranking = np.where(possible & ~chosen, self.coarse[:, : self.table.num_static], -np.inf)
                best = np.argpartition(-ranking, scored - 1, axis=1)[:, :scored]  # [n, K + margin]
                np.put_along_axis(chosen, best, True, axis=1)
                potential = possible & chosen
        if self.floors is not None:  # inference: only the pairs above the floor go through the fine FFNN
            above = self.coarse[:, : self.table.num_static] > self.floors[:, None]  # [n, B + n]
            potential = potential & above
            # Every option a span can have is a static column it may choose (``possible``) above its floor, or a
            # version: with K the best of them by coarse score are among those just scored, so a span whose static
            # columns all fall below its floor has none.
            self.may_choose = (possible & above).any(axis=1)
        self.score_static(*np.nonzero(potential))

    def scored_per_span(self, gold: GoldAntecedents | None) -> int:
        """With max_top_entities K: the static columns each span has scored in the static pass, K and the margin
        (``PREFILTER_MARGIN`` in training, with ``gold``; ``INFERENCE_PREFILTER_MARGIN`` at inference)."""
        margin = PREFILTER_MARGIN if gold is not None else INFERENCE_PREFILTER_MARGIN
        return self.limit + math.ceil(self.limit * margin)

    def potential(self) -> np.ndarray:
        """``[n, B + n]`` bool: the static rows each read span may choose: every scored base row and every
        earlier read span (the new entity or the slot it becomes)."""
        n, num_base = len(self.located_host), self.num_base
        base = np.broadcast_to(self.scored_base, (n, num_base))
        earlier = np.tri(n, n, -1, dtype=bool)  # [n, n]: j < i
        return np.concatenate([base, earlier], axis=1)

    def gold_mask(
        self, memory: EntityMemory, spans: Sequence[Span], gold: GoldAntecedents | None, first: int
    ) -> np.ndarray:
        """``[n, B + n]`` bool: ``gold_rows`` as a mask (all False without ``gold``)."""
        mask = np.zeros((len(spans), self.table.num_static), dtype=bool)
        if gold is not None:
            for position, rows in self.gold_rows(memory, spans, gold, first).items():
                mask[position, rows] = True
        return mask

    def gold_rows(
        self, memory: EntityMemory, spans: Sequence[Span], gold: GoldAntecedents, first: int
    ) -> dict[int, list[int]]:
        """For each read span from ``first`` on, the static rows that hold its gold options or may: the live
        columns of the entities holding an earlier mention of its gold cluster (``GoldAntecedents.target_ids``),
        and the rows of its cluster's earlier mentions read in this segment since ``first`` (which entity each
        joins is decided later)."""
        position_of = {span: position for position, span in enumerate(spans)}
        columns = memory.columns()
        found: dict[int, list[int]] = {}
        for position in range(first, len(spans)):
            span = spans[position]
            if not gold.is_gold(span):
                continue
            targets = gold.target_ids(span, memory, True)
            rows = [memory.row_of(columns[column]) for column in memory.scored_columns(targets)]
            for antecedent in gold.earlier.get(span, []):
                earlier = position_of.get(antecedent)
                if earlier is not None and first <= earlier < position:
                    rows.append(self.table.span_row(earlier))
            rows = [row for row in rows if row < self.table.num_static]
            if rows:
                found[position] = rows
        return found

    def version_pass(
        self, position: int, row: int, embedding: torch.Tensor, projection: torch.Tensor, prior: torch.Tensor
    ) -> None:
        """3. The representation ``row`` (``[D]``, ``[ffnn]``, a scalar; made by the read span at ``position``,
        which is its anchor) against every later read span: one pass, one read."""
        later = slice(position + 1, len(self.located_host))
        count = len(self.located_host) - position - 1
        if count <= 0:
            return
        scorer = self.model.pair_scorer
        anchors = np.broadcast_to(self.located_host[position], (count, 2))  # [m, 2]: the span's, its anchor
        indices = self.features.indices(self.located_host[later], anchors)  # [3, m]
        features = self.feature_rows(indices)  # [f, P]
        index = host_tensor(np.concatenate([np.zeros((1, count), dtype=np.int64), features]), self.device)  # [1 + f, m]
        fine = scorer.scores(
            self.scored.targets[later],  # [m, D]
            embedding.unsqueeze(0),  # [1, D]
            index[0].unsqueeze(1),  # [m, 1]: the one candidate
            self.pair_features(index[1:]),  # [m, 1, F]
            candidate_projection=projection.unsqueeze(0),
            parts=self.weights,
            target_projection=self.scored.target_projections[later],
        ).squeeze(1)  # [m]
        read = [fine]
        if self.model.uses_coarse:
            with scorer.inference_autocast(embedding):
                bilinear = (self.sources[later] @ embedding).float()  # [m]
            if self.calibrated:
                fine = fine + prior + bilinear
                read = [fine]
            if self.coarse is not None:
                read.append(bilinear.detach() + prior.detach().float())
        host = to_host(torch.cat(read) if len(read) > 1 else read[0])
        positions = np.arange(position + 1, len(self.located_host))
        rows = np.full(count, row)
        if self.coarse is not None:
            self.coarse[positions, row] = host[count:]
        self._record(positions, rows, fine, host[:count])

    def score_missing(
        self, memory: EntityMemory, spans: Sequence[Span], gold: GoldAntecedents | None, position: int, rows: np.ndarray
    ) -> None:
        """4. Score the static ``rows`` the span at ``position`` chose without their score, and every later span's
        next best static columns (its gold ones, and its best ``2**rounds`` times K + margin others among the live
        ones and the spans read from ``position`` on, by coarse score): one pass, one read."""
        self.rounds += 1
        n, num_static = len(spans), self.table.num_static
        live_rows = memory.live_base()[0] + [row for row in memory.live_fresh()[0] if row < num_static]
        # [m, B + n]: for each span from ``position`` on, the live static columns and the spans read since
        # ``position`` before it (an earlier span's row is a live column now or never again)
        candidates = np.zeros((n - position, num_static), dtype=bool)
        candidates[:, self.num_base + position : self.num_base + n] = np.tri(n - position, n - position, -1, dtype=bool)
        candidates[:, live_rows] = True
        wanted = self.gold_mask(memory, spans, gold, position)[position:] & candidates  # [m, B + n]
        if gold is not None:  # training: every span read since ``position`` too, as in the static pass
            wanted[:, self.num_base + position : self.num_base + n] |= np.tri(
                n - position, n - position, -1, dtype=bool
            )
        ranking = np.where(candidates & ~wanted, self.coarse[position:, :num_static], -np.inf)
        take = min(num_static, self.scored_per_span(gold) * 2**self.rounds)
        best = np.argpartition(-ranking, take - 1, axis=1)[:, :take]  # [m, take]
        np.put_along_axis(wanted, best, True, axis=1)
        wanted &= candidates & (self.flat[position:, :num_static] < 0)
        wanted[0, rows] = True
        at, found = np.nonzero(wanted)
        self.score_static(at + position, found)
