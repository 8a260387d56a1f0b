"""A segment's greedy decisions, taken on the host over its batched scores.

The read spans are taken in (start, end) order. For each, the options are the new-entity option (score
``threshold``) and the active columns (``EntityMemory``: scored, not superseded), in column order; with
``max_top_entities`` K and more than K columns only the gold ones (training) and the best others by coarse
score up to K; at inference with a coarse floor only those above it. Each column scores ``value + s_m(m)``
(``SegmentScores``); the best option wins, the first among equals: a new entity (unless ``min_mention_score``
refuses it), or an update of the column's entity. These are the decisions of scoring one span at a time, now
that every score they read was computed in the segment's passes.

What the host does per span is a few numpy operations over the segment's score arrays; the device is
called per span only where a decision makes a vector no pass could know in advance: an update of a scored
entity representation (its new version, and its scores against the later spans, ``SegmentScores.version_pass``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from coref_pipeline.models.incremental.gold import GoldAntecedents
from coref_pipeline.models.incremental.loss import SegmentLoss
from coref_pipeline.models.incremental.memory import EntityMemory, SegmentTable, Span
from coref_pipeline.models.incremental.scoring import ScoringModel, SegmentScores


class ActiveColumns:
    """The scored, not superseded columns of the memory in column order: the base rows (as numpy arrays,
    kept for the segment, a mask updated as rows are superseded) and the fresh columns (``live_fresh``, read
    again only where the memory changed them other than by appending: ``EntityMemory.fresh_changes``)."""

    def __init__(self, memory: EntityMemory) -> None:
        self.memory = memory
        rows, entities = memory.live_base()
        self.base_rows = np.array(rows, dtype=np.int64)  # [b]
        self.base_entities = np.array(entities, dtype=np.int64)  # [b]
        self.position_of = {row: position for position, row in enumerate(rows)}
        self.alive = np.ones(len(rows), dtype=bool)  # [b]
        self.superseded: set[int] = set()
        self.live_base = (self.base_rows, self.base_entities)  # the alive base rows and their entities
        self.fresh_rows: list[int] = []  # the live fresh columns read so far: rows and entities
        self.fresh_entities: list[int] = []
        self.fresh_read = 0  # how many of memory.fresh_ids they cover
        self.fresh_changes = memory.fresh_changes  # the memory's count when they were read
        self.columns: tuple[np.ndarray, np.ndarray] | None = None  # current()'s, while nothing changed

    def current(self) -> tuple[np.ndarray, np.ndarray]:
        """The active columns' table rows and entities, in column order."""
        memory = self.memory
        if len(memory.superseded) != len(self.superseded):
            for row in memory.superseded - self.superseded:
                if row in self.position_of:
                    self.alive[self.position_of[row]] = False
            self.superseded = set(memory.superseded)
            self.live_base = (self.base_rows[self.alive], self.base_entities[self.alive])
            self.columns = None
        if memory.fresh_changes != self.fresh_changes:
            self.fresh_rows, self.fresh_entities, self.fresh_read = [], [], 0
            self.fresh_changes = memory.fresh_changes
            self.columns = None
        if len(memory.fresh_ids) != self.fresh_read:
            rows, entities = memory.live_fresh(self.fresh_read)
            self.fresh_rows += rows
            self.fresh_entities += entities
            self.fresh_read = len(memory.fresh_ids)
            self.columns = None
        if self.columns is None:
            self.columns = (
                np.concatenate([self.live_base[0], np.array(self.fresh_rows, dtype=np.int64)]),
                np.concatenate([self.live_base[1], np.array(self.fresh_entities, dtype=np.int64)]),
            )
        return self.columns


def span_options(required: np.ndarray, coarse: np.ndarray | None, limit: int | None, floor: float | None) -> np.ndarray:
    """Which of a span's active columns are its options (``[columns]`` bool): all of them, or with ``limit`` (K)
    and more than K, the ``required`` ones (gold, in training) and the best others by ``coarse`` score (``[columns]``;
    the first among equals) up to K; then at inference only those whose coarse score is above ``floor``."""
    if floor is not None and not required.any():
        # Inference: the columns above the floor, and of more than K of them the K best. The same as the K best,
        # then those above the floor (each column above it ranks before every other), without a sort where at
        # most K pass the floor, as most spans' columns do.
        keep = coarse > floor
        if limit is not None and int(np.count_nonzero(keep)) > limit:
            above = np.flatnonzero(keep)
            keep = np.zeros_like(keep)
            keep[above[np.argsort(-coarse[above], kind="stable")[:limit]]] = True
        return keep
    keep = np.ones(required.shape[0], dtype=bool)
    if limit is not None and required.shape[0] > limit:
        others = np.flatnonzero(~required)
        best = others[np.argsort(-coarse[others], kind="stable")]
        keep = required.copy()
        keep[best[: max(0, limit - int(required.sum()))]] = True
    if floor is not None:
        keep &= coarse > floor
    return keep


def options_of(
    columns: ActiveColumns, scores: SegmentScores, position: int, targets: Sequence[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The options of the read span at ``position`` (``span_options`` of the active columns): their table rows,
    their entities and which are gold (their entity among ``targets``), in column order."""
    rows, entities = columns.current()
    # [columns]: the gold columns, always among the options (none at inference)
    required = np.isin(entities, targets) if len(targets) else np.zeros(entities.shape[0], dtype=bool)
    coarse = scores.coarse[position, rows] if scores.coarse is not None else None
    floor = scores.floors[position] if scores.floors is not None else None
    keep = span_options(required, coarse, scores.limit, floor)
    return rows[keep], entities[keep], required[keep]


def decide_segment(
    model: ScoringModel,
    memory: EntityMemory,
    table: SegmentTable,
    scores: SegmentScores,
    spans: Sequence[Span],
    embeddings: torch.Tensor,
    projections: torch.Tensor,
    mention_scores: torch.Tensor,
    gold: GoldAntecedents | None = None,
    loss: SegmentLoss | None = None,
) -> None:
    """Decide each read span of the segment in turn (``spans``, global offsets; ``embeddings`` ``[n, D]``,
    ``projections`` ``[n, ffnn]`` and ``mention_scores`` ``[n]`` theirs) and update ``memory``; in training
    (``gold`` and ``loss`` given) record each decision's options in ``loss``."""
    config = model.config
    all_antecedents = config.loss == "all_antecedents"
    threshold = np.float32(config.threshold)
    columns = ActiveColumns(memory)
    # Without overlapping_antecedents: the largest end of each entity's mentions in this segment (a span overlaps
    # no mention of an earlier segment), so that a span joins no entity with a mention overlapping it.
    reach: dict[int, int] | None = None if config.overlapping_antecedents else {}
    may_choose = scores.may_choose  # [n] at inference with a coarse floor (most spans have no option there)
    for position, span in enumerate(spans):
        mention_score = scores.mention_scores[position]
        if not memory.active or (may_choose is not None and not may_choose[position] and not table.versions):
            # No option: the new entity wins. Inference with a floor: no static column above it, and no version
            # yet (a version's coarse score is known only once an update makes it).
            if model.may_start_entity(float(mention_score)):
                entity_id = memory.add(span, table.span_row(position))
                if reach is not None:
                    reach[entity_id] = span[1]
            continue
        targets = gold.target_ids(span, memory, all_antecedents) if gold is not None else []
        rows, entities, required = options_of(columns, scores, position, targets)
        if reach:
            apart = np.array([reach.get(int(entity), -1) < span[0] for entity in entities], dtype=bool)
            rows, entities, required = rows[apart], entities[apart], required[apart]
        missing = scores.flat[position, rows] < 0
        if missing.any():
            scores.score_missing(memory, spans, gold, position, rows[missing])
        logits = scores.value[position, rows] + mention_score  # float32, as the scores are added on the device
        best_option = int(np.argmax(np.concatenate([[threshold], logits])))  # 0: a new entity
        entity_id = int(entities[best_option - 1]) if best_option else None
        if loss is not None:
            loss.record(position, scores.flat[position, rows], required)
            if config.teacher_forcing_rate > 0 and float(torch.rand((), device="cpu")) < config.teacher_forcing_rate:
                entity_id = targets[0] if targets else None
        if entity_id is None:
            if model.may_start_entity(float(mention_score)):
                entity_id = memory.add(span, table.span_row(position))
                if reach is not None:
                    reach[entity_id] = span[1]
            continue
        representation_row = None
        if config.entity_representation:
            entity, projection, _ = table.vectors(memory.row_of(entity_id))  # [D], [ffnn]
            mention = embeddings[position]  # [D]
            alpha = model.update_weight(entity, mention, len(memory.mentions[entity_id]))
            entity = alpha * entity + (1 - alpha) * mention
            projection = alpha * projection + (1 - alpha) * projections[position]
            representation_row = table.add_version(entity, projection, mention_scores[position])
            scores.version_pass(position, representation_row, entity, projection, mention_scores[position])
        # else the representation is never scored: UPDATE is skipped (it would change nothing scored)
        memory.update(entity_id, span, representation_row, table.span_row(position))
        if reach is not None:
            reach[entity_id] = max(reach.get(entity_id, -1), span[1])
