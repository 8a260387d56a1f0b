"""A frozen copy of the incremental model as it was before issue 61 (commit 0a9ba0e, ``models/incremental.py``):
the reference the equality tests compare today's model with. Not used by the library; do not change its
arithmetic. One change since: in training the base columns' projections are computed again in each segment's
graph (``resolve_spans``), as the library does since Xia et al.'s code showed the fine FFNN's gradient through
earlier segments' entities (tests/original/test_icoref.py). Its own docstring follows.

The constant-memory incremental model of Xia, Sedoc and Van Durme (2020).

A document is read one segment at a time. Each segment is encoded, its
candidate spans are scored and pruned with the baseline's span scorer, and the
kept spans, in (start, end) order, are each compared with a bounded list of
active entities:

    score(m, e) = PAIRSCORE(m, e) + s_m(m),   score(m, new entity) = threshold

(``score: paper``), or, with ``score: calibrated``, plus the other terms of the
baseline's antecedent score: s_m of the entity's most recent mention and the
coarse bilinear term (W g_m + b) . e, so that an entity of one mention scores
as the baseline scores that antecedent.

PAIRSCORE is the baseline's fine FFNN with the mention in the target slot and
the entity in the candidate slot (as the authors' code), the speaker feature
replaced by zeros, the segment distance fixed at 0 and the distance bucket
measured in subtokens from the entity's most recent mention
(``pair_features: paper``); ``pair_features: baseline`` computes the baseline's
features with that mention as the antecedent (``PairFeatures``). The argmax
decides, for good: a new entity, or an update ``e <- a e + (1 - a) m``. After
each segment, entities whose most recent mention is far behind leave the active
list (their mentions are kept for the output only).

In training the loss of each segment is backpropagated at its end and the
entity representations are detached (truncated backpropagation), so memory
does not grow with the document either.

With ``recent_mentions`` N > 0 each active entity also keeps its N most recent
mentions as scoring columns (each scored as the baseline scores that antecedent);
the entity's score is the best of its columns, and the loss marginalises over the
gold entity's columns. ``entity_representation: false`` scores those mentions
only: with N covering every mention, no eviction, every earlier span among the
baseline's antecedents and ``pair_features: baseline``, the baseline's decisions.

``mention_loss_coef`` adds the baseline's auxiliary mention loss over each
segment's candidate spans (or its kept spans: ``mention_loss_spans: top``) to the
training loss.

With ``batch_per_segment`` all of a segment's kept spans are scored against the
entities as they were at its start in one pass of the fine FFNN; span by span
only the entities created or updated in the segment are scored: the same
decisions as scoring every span on its own. With mention columns only and
``max_top_entities``, a mention column never changes once made, so that pass
also scores each span against the segment's earlier spans (the slots they
become), and span by span almost nothing is left to score. In training that pass
runs with gradients and the segment's loss reads the options it scored from it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from coref_pipeline.models.config import IncrementalConfig, require_resolved
from coref_pipeline.models.document import DocumentTensors
from coref_pipeline.models.encoder import SegmentEncoder
from coref_pipeline.models.layers import FFNN
from coref_pipeline.models.scorers import PairScorer, SpanScorer
from coref_pipeline.models.spans import bucket_distance, gold_mention_loss

logger = logging.getLogger(__name__)

Span = tuple[int, int]
# Most elements of one fine-FFNN input when a segment's spans are scored together (batch_per_segment):
# 2**23 floats, 32 MB in fp32, per chunk of spans.
BASE_SCORE_CHUNK_ELEMENTS = 2**23
# base_scores scores each span's K (max_top_entities) best columns and this share more: columns leave the
# running during the segment (superseded, dropped slots), and the next in line are then already scored.
PREFILTER_MARGIN = 0.1


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


@dataclass
class EntityMemory:
    """Active entities (representations on the compute device) and evicted ones (mention lists only).

    Each scoring column is an entity's representation or, with ``recent_mentions`` M > 0, one
    of its M most recent mentions (a *slot*: the mention's embedding, projection and score, as
    the baseline holds an antecedent). Columns have ids: an entity's id, or a slot's, whose
    ``owner`` is its entity. With ``score_representations`` false the representation columns
    are held but never scored.

    Within a segment the columns as they were at its start (``base_*``, detached) are kept
    apart from those added or updated in it (``fresh_*``, part of the segment's graph);
    ``consolidate`` merges them at the segment's end. Scoring runs over the columns
    ``base_ids + fresh_ids``, with base rows that have a fresh version (or were dropped)
    masked.
    """

    recent_mentions: int = 0
    score_representations: bool = True
    base_embeddings: torch.Tensor | None = None  # [num_base, span_dim]
    base_projections: torch.Tensor | None = None  # [num_base, ffnn]: the pair scorer's candidate part
    base_priors: torch.Tensor | None = None  # [num_base]: s_m of the column's (most recent) mention
    base_ids: list[int] = field(default_factory=list)
    superseded: set[int] = field(default_factory=set)  # base rows with a fresh version, or dropped
    fresh_ids: list[int] = field(default_factory=list)
    fresh_embeddings: list[torch.Tensor] = field(default_factory=list)  # each [span_dim]
    fresh_projections: list[torch.Tensor] = field(default_factory=list)  # each [ffnn]
    fresh_priors: list[torch.Tensor] = field(default_factory=list)  # each a scalar
    mentions: dict[int, list[Span]] = field(default_factory=dict)  # every entity's mentions, in order
    entity_of_span: dict[Span, int] = field(default_factory=dict)
    active: set[int] = field(default_factory=set)
    evicted: list[int] = field(default_factory=list)
    max_active: int = 0
    owner: dict[int, int] = field(default_factory=dict)  # slot id -> its entity's id (active slots only)
    slot_span: dict[int, Span] = field(default_factory=dict)  # slot id -> its mention
    slots: dict[int, list[int]] = field(default_factory=dict)  # active entity id -> its slot ids, oldest first
    next_id: int = 0
    changed: list[int] = field(default_factory=list)  # the columns the last ``add`` or ``update`` created or changed
    dropped: list[int] = field(default_factory=list)  # base slots dropped in this segment (gone at its end)
    base_representations: list[int] = field(default_factory=list)  # base rows holding a representation (not a slot)
    base_row: dict[int, int] = field(default_factory=dict)  # column id -> its row in base_ids

    def __len__(self) -> int:
        return len(self.active)

    def columns(self) -> list[int]:
        """Column id of each scoring column (base rows first, superseded ones included)."""
        return self.base_ids + self.fresh_ids

    def entity_of(self, column_id: int) -> int:
        """The entity a column scores: a slot's owner, or the entity itself."""
        return self.owner.get(column_id, column_id)

    def anchor(self, column_id: int) -> Span:
        """The mention a column's pair features are measured from: a slot's own, an entity's most recent one."""
        span = self.slot_span.get(column_id)
        return span if span is not None else self.mentions[column_id][-1]

    def fresh_tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """The fresh columns' embeddings ``[num_fresh, D]``, projections ``[num_fresh, ffnn]``, priors ``[num_fresh]``.

        None when there are none.
        """
        if not self.fresh_ids:
            return None
        return torch.stack(self.fresh_embeddings), torch.stack(self.fresh_projections), torch.stack(self.fresh_priors)

    def _set_base_ids(self, base_ids: list[int]) -> None:
        self.base_ids = base_ids
        self.base_row = {column_id: row for row, column_id in enumerate(base_ids)}
        self.base_representations = [row for row, column_id in enumerate(base_ids) if column_id not in self.owner]

    def masked_columns(self, num_columns: int) -> list[int]:
        """The first ``num_columns`` columns that are not scored: superseded base rows and, with
        ``score_representations`` false, representations."""
        rows = set(self.superseded)
        if not self.score_representations:
            rows.update(self.base_representations)
            num_base = len(self.base_ids)
            fresh = self.fresh_ids[: max(0, num_columns - num_base)]
            rows.update(num_base + position for position, column_id in enumerate(fresh) if column_id not in self.owner)
        return sorted(rows)

    def mask_unscored(self, scores: torch.Tensor) -> torch.Tensor:
        """``scores`` over the base rows or all the columns (last dimension), unscored columns -inf."""
        rows = self.masked_columns(scores.shape[-1])
        if not rows:
            return scores
        return scores.index_fill(-1, torch.tensor(rows, device=scores.device), float("-inf"))

    def mask_superseded(self, scores: torch.Tensor) -> torch.Tensor:
        """``scores`` over the columns (last dimension) with the base rows superseded in this segment -inf: what
        ``mask_unscored`` adds to scores whose other unscored columns are -inf already."""
        if not self.superseded:
            return scores
        rows = torch.tensor(sorted(self.superseded), dtype=torch.long, device=scores.device)
        return scores.index_fill(-1, rows, float("-inf"))

    def scored_columns(self, entity_ids: Sequence[int]) -> list[int]:
        """The scored columns of the active entities ``entity_ids``, entity by entity in that order (each
        entity's in column order): its representation (when scored) and its slots, in their fresh version
        if they have one, else their base row (a dropped slot has left ``slots``)."""
        num_base = len(self.base_ids)
        found = []
        for entity_id in entity_ids:
            column_ids = ([entity_id] if self.score_representations else []) + self.slots.get(entity_id, [])
            columns = []
            for column_id in column_ids:
                if column_id in self.fresh_ids:
                    columns.append(num_base + self.fresh_ids.index(column_id))
                else:  # a base row not superseded, as it has no fresh version
                    columns.append(self.base_row[column_id])
            found.extend(sorted(columns))
        return found

    def _column(self, column_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The current embedding ``[span_dim]``, projection ``[ffnn]`` and prior of an active column."""
        if column_id in self.fresh_ids:
            position = self.fresh_ids.index(column_id)
            return self.fresh_embeddings[position], self.fresh_projections[position], self.fresh_priors[position]
        row = self.base_row[column_id]
        return self.base_embeddings[row], self.base_projections[row], self.base_priors[row]

    def embedding(self, entity_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The current representation of an active entity and its projection: ``[span_dim]``, ``[ffnn]``."""
        return self._column(entity_id)[:2]

    def _set_fresh(
        self, column_id: int, embedding: torch.Tensor, projection: torch.Tensor, prior: torch.Tensor
    ) -> None:
        """Give a column a fresh version (a new column, or a base row superseded)."""
        if column_id in self.fresh_ids:
            position = self.fresh_ids.index(column_id)
            self.fresh_embeddings[position] = embedding
            self.fresh_projections[position] = projection
            self.fresh_priors[position] = prior
            return
        if column_id in self.base_row:
            self.superseded.add(self.base_row[column_id])
        self.fresh_ids.append(column_id)
        self.fresh_embeddings.append(embedding)
        self.fresh_projections.append(projection)
        self.fresh_priors.append(prior)

    def _add_slot(
        self, entity_id: int, span: Span, embedding: torch.Tensor, projection: torch.Tensor, prior: torch.Tensor
    ) -> int:
        """A slot for one of the entity's mentions (its id); the oldest slots beyond ``recent_mentions`` go."""
        slot_id = self.next_id
        self.next_id += 1
        self.owner[slot_id] = entity_id
        self.slot_span[slot_id] = span
        self.slots.setdefault(entity_id, []).append(slot_id)
        self._set_fresh(slot_id, embedding, projection, prior)
        while len(self.slots[entity_id]) > self.recent_mentions:
            self._drop_slot(self.slots[entity_id].pop(0))
        return slot_id

    def _drop_slot(self, slot_id: int) -> None:
        """A slot no longer scored; a base row stays (masked) until the segment's end."""
        if slot_id in self.fresh_ids:
            position = self.fresh_ids.index(slot_id)
            for column in (self.fresh_ids, self.fresh_embeddings, self.fresh_projections, self.fresh_priors):
                del column[position]
            del self.owner[slot_id], self.slot_span[slot_id]
        else:
            self.superseded.add(self.base_row[slot_id])
            self.dropped.append(slot_id)

    def add(self, embedding: torch.Tensor, projection: torch.Tensor, span: Span, prior: torch.Tensor) -> int:
        """A new entity of one mention (``prior``: that mention's score); its id.

        ``changed`` then holds the ids of the columns it created, the entity's own first.
        """
        entity_id = self.next_id
        self.next_id += 1
        self._set_fresh(entity_id, embedding, projection, prior)
        self.mentions[entity_id] = [span]
        self.entity_of_span[span] = entity_id
        self.active.add(entity_id)
        self.max_active = max(self.max_active, len(self.active))
        created = [entity_id]
        if self.recent_mentions and not self.score_representations:
            created.append(self._add_slot(entity_id, span, embedding, projection, prior))
        self.changed = created
        return entity_id

    def update(
        self,
        entity_id: int,
        embedding: torch.Tensor,
        projection: torch.Tensor,
        span: Span,
        prior: torch.Tensor,
        mention: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        """The entity's new representation after ``span`` joined it (``prior``: that mention's score).

        ``mention``: the span's own embedding and projection, for its slot (``recent_mentions``).
        ``changed`` then holds the ids of the columns created or changed. With scored representations an
        entity of one mention has no slot (its representation is that mention); it gets one
        for that first mention when a second joins.
        """
        changed = []
        if self.recent_mentions and self.score_representations and len(self.mentions[entity_id]) == 1:
            first_embedding, first_projection, first_prior = self._column(entity_id)  # not yet updated
            changed.append(
                self._add_slot(entity_id, self.mentions[entity_id][0], first_embedding, first_projection, first_prior)
            )
        self._set_fresh(entity_id, embedding, projection, prior)
        changed.append(entity_id)
        self.mentions[entity_id].append(span)
        self.entity_of_span[span] = entity_id
        if self.recent_mentions:
            if mention is None:
                raise ValueError("recent_mentions needs the mention's own embedding and projection")
            changed.append(self._add_slot(entity_id, span, *mention, prior))
        self.changed = [column_id for column_id in changed if column_id in self.fresh_ids]

    def consolidate(self) -> None:
        """Merge the fresh columns into the base ones, detached (the end of a segment)."""
        if not self.fresh_ids and not self.superseded:
            return
        keep = [row for row in range(len(self.base_ids)) if row not in self.superseded]
        embeddings, projections, priors = [], [], []
        if self.fresh_ids:
            embeddings.append(torch.stack(self.fresh_embeddings).detach())
            projections.append(torch.stack(self.fresh_projections).detach())
            priors.append(torch.stack(self.fresh_priors).detach())
        if keep:
            rows = torch.tensor(keep, dtype=torch.long, device=self.base_embeddings.device)
            embeddings.insert(0, self.base_embeddings.index_select(0, rows))
            projections.insert(0, self.base_projections.index_select(0, rows))
            priors.insert(0, self.base_priors.index_select(0, rows))
        self.base_embeddings = torch.cat(embeddings) if embeddings else None
        self.base_projections = torch.cat(projections) if projections else None
        self.base_priors = torch.cat(priors) if priors else None
        self._set_base_ids([self.base_ids[row] for row in keep] + self.fresh_ids)
        self.superseded = set()
        for slot_id in self.dropped:
            del self.owner[slot_id], self.slot_span[slot_id]
        self.dropped = []
        self.fresh_ids, self.fresh_embeddings, self.fresh_projections, self.fresh_priors = [], [], [], []

    def evict(self, position: int, singleton_distance: int | None, distance: int | None) -> list[int]:
        """Consolidate, then remove the entities the policy names (with their slots); return their ids.

        An entity leaves when the midpoint of its most recent mention is more than
        ``distance`` subtokens before ``position`` (as Xia et al. measure it), or more
        than ``singleton_distance`` when it has a single mention. ``None`` switches a
        rule off.
        """
        self.consolidate()
        leaving = []
        for entity_id in self.base_ids:
            if entity_id in self.owner:
                continue  # a slot leaves with its entity
            start, end = self.mentions[entity_id][-1]
            behind = position - (start + end) / 2
            single = len(self.mentions[entity_id]) == 1
            if (distance is not None and behind > distance) or (
                singleton_distance is not None and single and behind > singleton_distance
            ):
                leaving.append(entity_id)
        if not leaving:
            return []
        gone = set(leaving)
        keep = [row for row, column_id in enumerate(self.base_ids) if self.entity_of(column_id) not in gone]
        rows = torch.tensor(keep, dtype=torch.long, device=self.base_embeddings.device)
        self.base_embeddings = self.base_embeddings.index_select(0, rows) if keep else None
        self.base_projections = self.base_projections.index_select(0, rows) if keep else None
        self.base_priors = self.base_priors.index_select(0, rows) if keep else None
        self._set_base_ids([self.base_ids[row] for row in keep])
        for entity_id in leaving:
            for slot_id in self.slots.pop(entity_id, []):
                del self.owner[slot_id], self.slot_span[slot_id]
        self.active -= gone
        self.evicted.extend(leaving)
        return leaving

    def clusters(self, min_size: int = 2) -> list[list[Span]]:
        """Every entity (active or evicted) with at least ``min_size`` mentions, mentions sorted."""
        found = [sorted(mentions) for mentions in self.mentions.values() if len(mentions) >= min_size]
        return sorted(found)


class OwnRows:
    """A segment's spans' rows in ``base_scores``, shared by their ``BaseScores``, and the rows of the fresh
    columns among them (``of_fresh``), extended as the segment's columns are added rather than rebuilt per span."""

    def __init__(self, spans: Sequence[Span], device: torch.device) -> None:
        self.row_of_span = {span: row for row, span in enumerate(spans)}
        self.device = device
        self.ids: list[int] = []  # the fresh column ids ``rows`` was built for
        self.rows = torch.empty(0, dtype=torch.long, device=device)  # [len(ids)]

    def of_fresh(self, memory: EntityMemory) -> torch.Tensor:
        """Each fresh column's row among the segment's spans, -1 for a representation: ``[num_fresh]``.

        A column's row never changes (a slot keeps its mention), so the rows of the columns seen
        before are kept while the fresh ids only grow; a column that left starts the list again.
        """
        ids = memory.fresh_ids
        if ids == self.ids:
            return self.rows
        if ids[: len(self.ids)] != self.ids:  # a column left: start again
            self.ids, self.rows = [], self.rows[:0]
        tail = [self.row_of_span.get(memory.slot_span.get(column_id), -1) for column_id in ids[len(self.ids) :]]
        self.rows = torch.cat([self.rows, torch.tensor(tail, dtype=torch.long, device=self.device)])
        self.ids = list(ids)
        return self.rows


@dataclass
class BaseScores:
    """One span's scores against the base entities, computed with its segment's other spans at the segment's start.

    ``fine``: ``pair_scores``' value for each base row (superseded ones not yet masked), valid
    where ``known``; with the pre-filter and more base entities than ``max_top_entities`` only
    the span's best base rows by coarse score were computed (``known``), the others are scored
    on demand when chosen.

    With mention columns only (``entity_representation: false``) and the pre-filter, each of
    the segment's spans will be a mention column once processed, with its own embedding: the
    pre-filter's K then ranks the base rows and the segment's earlier spans together, and
    ``own_fine`` holds the span's score against those earlier spans (rows of ``own_rows``) that
    made its K, for the slots they become.
    """

    fine: torch.Tensor  # [B]
    known: torch.Tensor | None  # [B] bool; None: every row
    coarse: torch.Tensor | None  # [B]: the pre-filter's ranking score (no grad); None without the pre-filter
    own_fine: torch.Tensor | None = None  # [k]: against the segment's spans (valid for earlier ones, where own_known)
    own_known: torch.Tensor | None = None  # [k] bool; None: every earlier span
    own_coarse: torch.Tensor | None = None  # [k]: the pre-filter's ranking score of the segment's spans
    own_rows: OwnRows | None = None  # the segment's spans' rows (shared by its spans)


@dataclass
class IncrementalOutput:
    """What the model did with one document."""

    clusters: list[list[Span]]  # entities with two or more mentions (subtoken spans)
    loss: float | None  # training objective summed over the document (None at inference without gold)
    memory: EntityMemory
    kept_spans: list[Span]


class GoldAntecedents:
    """For each gold mention, the earlier mentions of its cluster (most recent first)."""

    def __init__(self, document: DocumentTensors) -> None:
        spans = list(zip(document.gold_starts.tolist(), document.gold_ends.tolist(), strict=True))
        self.cluster_of: dict[Span, int] = dict(zip(spans, document.gold_cluster_ids.tolist(), strict=True))
        by_cluster: dict[int, list[Span]] = {}
        for span in sorted(spans):
            by_cluster.setdefault(self.cluster_of[span], []).append(span)
        self.earlier: dict[Span, list[Span]] = {}
        for mentions in by_cluster.values():
            for index, span in enumerate(mentions):
                self.earlier[span] = mentions[:index][::-1]

    def is_gold(self, span: Span) -> bool:
        return span in self.cluster_of

    def target_ids(self, span: Span, memory: EntityMemory, all_antecedents: bool) -> list[int]:
        """Ids of the gold entities for ``span`` (empty: the new-entity option is gold).

        ``latest_antecedent``: the entity holding the most recent earlier gold mention,
        if that mention was kept and its entity is still active. ``all_antecedents``:
        every active entity holding an earlier gold mention, most recent first.
        """
        found: list[int] = []
        for antecedent in self.earlier.get(span, []):
            entity_id = memory.entity_of_span.get(antecedent)
            if entity_id is not None and entity_id in memory.active and entity_id not in found:
                found.append(entity_id)
            if not all_antecedents:
                break
        return found


class SegmentLoss:
    """A segment's training loss computed once its decisions are made (``batch_per_segment``).

    While the spans are resolved (without gradients) it records, for each span that got
    a loss, the options it had: the columns whose score was finite, each with where its score
    is in the segment's graph. Most come from the segment's batched pass (``base_scores``, run
    with gradients in training): the span's row of that pass and the column in it. The others,
    scored on demand during the decisions, are rows of a table of the base entities (detached)
    followed by every version an entity took in the segment (created or updated: tensors of
    the segment's graph), each with the distance the feature saw. ``loss`` scores those in one
    pass of the fine FFNN, gathers the rest from the batched pass, and sums
    ``logsumexp(options) - logsumexp(gold options)``.
    """

    def __init__(self, memory: EntityMemory, batch: torch.Tensor | None = None) -> None:
        self.num_base = len(memory.base_ids)
        self.base = (memory.base_embeddings, memory.base_projections, memory.base_priors)
        self.batch = batch  # [read spans, T]: base_scores' fine scores, in the segment's graph (None: no such pass)
        self.versions: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (embedding, projection, prior)
        self.version_of: dict[int, int] = {}  # column id -> its latest version (a fresh column)
        self.spans: list[int] = []  # the span's row in the segment's kept spans
        self.positions: list[int] = []  # the span's row in ``batch`` (0 when it has none)
        self.options: list[list[int]] = []  # table rows of its finite columns scored on demand
        self.batched: list[list[int]] = []  # columns of ``batch`` of its other finite columns
        self.located: list[tuple[int, int]] = []  # the span's PairFeatures.positions
        self.anchors: list[list[tuple[int, int]]] = []  # each table option's anchor's
        self.gold: list[list[tuple[bool, int]]] = []  # (from the batch, position among those options) of each

    def new_versions(self, memory: EntityMemory, column_ids: Sequence[int]) -> None:
        """Record what ``memory`` now holds for the fresh columns ``column_ids``."""
        for column_id in column_ids:
            position = memory.fresh_ids.index(column_id)
            self.versions.append(
                (memory.fresh_embeddings[position], memory.fresh_projections[position], memory.fresh_priors[position])
            )
            self.version_of[column_id] = len(self.versions) - 1

    def record(
        self,
        memory: EntityMemory,
        span_row: int,
        span: Span,
        finite: torch.Tensor,
        gold_columns: Sequence[int],
        features: PairFeatures,
        position: int | None = None,
        from_batch: torch.Tensor | None = None,
    ) -> None:
        """One span's options (``finite``: ``[columns]`` over ``memory.columns()``) and its gold logits columns.

        ``position``: the span's row in the batched pass; ``from_batch``: ``[columns]``, each column's
        column in that pass where its score came from it, else -1 (None: every one was scored on demand).
        """
        columns = memory.columns()
        num_base = len(memory.base_ids)
        finite_columns = torch.nonzero(finite).flatten()  # [options]
        in_batch = [-1] * finite_columns.numel() if from_batch is None else from_batch[finite_columns].tolist()
        options, batched, anchors, where = [], [], [], {}
        for column, batch_column in zip(finite_columns.tolist(), in_batch, strict=True):
            if batch_column >= 0:
                where[column + 1] = (True, len(batched))
                batched.append(batch_column)
                continue
            column_id = columns[column]
            where[column + 1] = (False, len(options))
            options.append(column if column < num_base else self.num_base + self.version_of[column_id])
            anchors.append(memory.anchor(column_id))
        self.spans.append(span_row)
        self.positions.append(position if position is not None else 0)
        self.options.append(options)
        self.batched.append(batched)
        self.located.extend(features.positions([span]))
        self.anchors.append(features.positions(anchors))
        self.gold.append([where[column] for column in gold_columns if column])  # gold options are finite

    def _table_scores(
        self,
        model: ReferenceIncrementalModel,
        embeddings: torch.Tensor,
        target_projections: torch.Tensor,
        sources: torch.Tensor | None,
        features: PairFeatures,
        weights: tuple[torch.Tensor, ...],
        width: int,
    ) -> torch.Tensor:
        """The options scored on demand, through the fine FFNN in one pass: ``[n, width]`` (-inf past each
        span's own), calibrated terms included.

        The pass runs over the (span, option) pairs themselves, ``[P, 1]``, not over a ``[spans, width]``
        table padded to the span with the most such options: padding would be rows of the fine FFNN
        forward and backward that no loss reads.
        """
        device = embeddings.device
        tables = [[part] for part in self.base] if self.num_base else [[], [], []]
        for version in self.versions:
            for table, part in zip(tables, version, strict=True):
                table.append(part.unsqueeze(0))
        entities, projections, priors = (torch.cat(table) for table in tables)  # [rows, D], [rows, ffnn], [rows]
        having = [span for span, options in enumerate(self.options) if options]  # [m] spans with such options
        pair_row, pair_position, pair_option, pair_anchor = [], [], [], []  # per (span, option) pair
        for row, span in enumerate(having):
            options = self.options[span]
            pair_row.extend([row] * len(options))
            pair_position.extend(range(len(options)))
            pair_option.extend(options)
            pair_anchor.extend(self.anchors[span])
        cpu = torch.device("cpu")  # built on the host, whatever the default device, then moved
        located = torch.tensor([self.located[span] for span in having], dtype=torch.long, device=cpu)  # [m, 2]
        anchors = torch.tensor(pair_anchor, dtype=torch.long, device=cpu).reshape(-1, 1, 2)  # [P, 1, 2]
        index = torch.tensor(pair_option, dtype=torch.long, device=cpu).reshape(-1, 1)  # [P, 1]
        pair_row = torch.tensor(pair_row, dtype=torch.long, device=cpu)  # [P]: its span's row in having
        position = torch.tensor(pair_position, dtype=torch.long, device=cpu)  # [P]
        having_rows = torch.tensor([self.spans[span] for span in having], dtype=torch.long, device=cpu)  # [m]
        having = torch.tensor(having, dtype=torch.long, device=cpu)  # [m]
        located, anchors, index, pair_row, position, having_rows, having = (
            t.to(device) for t in (located, anchors, index, pair_row, position, having_rows, having)
        )
        located = located[pair_row]  # [P, 2]
        rows = having_rows[pair_row]  # [P]: each pair's span's row among the kept ones
        scores = model.pair_scorer.scores(
            embeddings[rows],
            entities,
            index,
            features(model.pair_scorer, located, anchors),
            candidate_projection=projections,
            parts=weights,
            target_projection=target_projections[rows],
        ).squeeze(1)  # [P]
        if model.config.score == "calibrated":  # as _score_against adds them
            # Each span against every row of the table, then gathered: no [P, D] copy of the entities (nor its
            # backward).
            bilinear = (sources[having_rows] @ entities.T).float()  # [m, rows]
            scores = scores + priors[index[:, 0]] + bilinear[pair_row, index[:, 0]]
        spread = scores.new_full((len(self.options), width), float("-inf"))  # [n, Ct]
        return spread.index_put((having[pair_row], position), scores)

    def loss(
        self,
        model: ReferenceIncrementalModel,
        embeddings: torch.Tensor,
        target_projections: torch.Tensor,
        sources: torch.Tensor | None,
        mention_scores: torch.Tensor,
        features: PairFeatures,
        weights: tuple[torch.Tensor, ...],
    ) -> torch.Tensor:
        """The summed loss of the recorded spans: a scalar in the segment's graph."""
        device = embeddings.device
        n = len(self.spans)
        table_width = max(len(options) for options in self.options)
        batch_width = max(len(batched) for batched in self.batched)
        cpu = torch.device("cpu")
        valid = torch.zeros(n, table_width + batch_width, dtype=torch.bool, device=cpu)  # [n, Ct + Cb]
        gold = torch.zeros(n, 1 + table_width + batch_width, dtype=torch.bool, device=cpu)  # [n, 1 + Ct + Cb]
        batch_index = torch.zeros(n, batch_width, dtype=torch.long, device=cpu)  # [n, Cb]
        for row, (options, batched, golds) in enumerate(zip(self.options, self.batched, self.gold, strict=True)):
            valid[row, : len(options)] = True
            valid[row, table_width : table_width + len(batched)] = True
            batch_index[row, : len(batched)] = torch.tensor(batched, dtype=torch.long, device=cpu)
            gold[row, [1 + (table_width if from_batch else 0) + at for from_batch, at in golds] or [0]] = True
        valid, gold, batch_index = (t.to(device) for t in (valid, gold, batch_index))
        parts = []
        if table_width:
            parts.append(
                self._table_scores(model, embeddings, target_projections, sources, features, weights, table_width)
            )
        if batch_width:
            positions = torch.tensor(self.positions, device=device)  # [n]
            parts.append(self.batch.index_select(0, positions).gather(1, batch_index))  # [n, Cb]
        rows = torch.tensor(self.spans, device=device)  # [n]
        scores = torch.cat(parts, dim=1) if parts else mention_scores.new_zeros(n, 0)  # [n, Ct + Cb]
        scores = (scores + mention_scores[rows].unsqueeze(1)).masked_fill(~valid, float("-inf"))
        logits = torch.cat([scores.new_full((n, 1), model.config.threshold), scores], dim=1)  # [n, 1 + Ct + Cb]
        gold_logits = logits.masked_fill(~gold, float("-inf"))
        return (torch.logsumexp(logits, 1) - torch.logsumexp(gold_logits, 1)).sum()


class ReferenceIncrementalModel(nn.Module):
    """Encoder, the baseline's span and pair scorers, and the entity update network."""

    def __init__(self, config: IncrementalConfig, encoder: SegmentEncoder) -> None:
        super().__init__()
        require_resolved(config)
        self.config = config
        self.encoder = encoder
        self.span_scorer = SpanScorer(config, encoder.hidden_size)
        self.span_dim = self.span_scorer.span_dim
        # With a frozen encoder, h_start and h_end (g's first columns) take no gradient, unless a learned update
        # mixes them into the entity representations it scores.
        mixed = config.entity_representation and config.update == "learned"
        fixed = 0 if config.finetune_encoder or mixed else 2 * encoder.hidden_size
        self.pair_scorer = PairScorer(config, self.span_dim, fixed_columns=fixed)
        # alpha = sigmoid(FFNN([e; m])): one hidden layer, ReLU (new, not in the baseline).
        self.alpha = FFNN(2 * self.span_dim, config.alpha_hidden_size, 1, 1, config.dropout_rate)
        if self.uses_coarse:  # the baseline's coarse bilinear W (copied from it)
            self.src_projection = nn.Linear(self.span_dim, self.span_dim)
        if not config.finetune_encoder:
            self.encoder.requires_grad_(False)

    @property
    def uses_coarse(self) -> bool:
        """Whether the score or the entity pre-filter needs the baseline's coarse bilinear term."""
        return self.config.score == "calibrated" or self.config.max_top_entities is not None

    def task_modules(self) -> list[nn.Module]:
        """Every module but the encoder (the task parameters)."""
        return [module for name, module in self.named_children() if name != "encoder"]

    def train(self, mode: bool = True) -> ReferenceIncrementalModel:
        """As ``nn.Module.train``, but a frozen encoder stays in evaluation mode (no dropout)."""
        super().train(mode)
        if not self.config.finetune_encoder:
            self.encoder.eval()
        return self

    # ---------------------------------------------------------------- pieces
    def encode_segment(self, document: DocumentTensors, index: int) -> torch.Tensor:
        """One segment's subtoken representations: ``[segment_len, H]``."""
        ids = document.input_ids[index : index + 1]
        mask = document.attention_mask[index : index + 1]
        if self.config.finetune_encoder and self.training:
            return self.encoder(ids, mask)
        with torch.no_grad():
            return self.encoder(ids, mask)

    def segment_spans(
        self, document: DocumentTensors, hidden: torch.Tensor, offset: int, train: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Kept spans of one segment: local starts, ends ``[k]``, embeddings ``[k, D]``, mention scores ``[k]``,
        and with ``train`` and ``mention_loss_coef`` the weighted mention loss of its candidates or of its kept
        spans (``mention_loss_spans``; else None)."""
        config = self.config
        length = hidden.shape[0]
        window = slice(offset, offset + length)
        starts, ends = document.candidate_spans(
            config.max_span_width, config.word_boundary_spans, window, config.special_token_spans
        )
        if starts.numel() == 0:
            empty = torch.zeros(0, dtype=torch.long, device=hidden.device)
            return empty, empty, hidden.new_zeros(0, self.span_dim), hidden.new_zeros(0), None
        k = max(1, min(int(length * config.top_span_ratio), starts.shape[0]))
        with_loss = train and bool(config.mention_loss_coef)
        over_candidates = config.mention_loss_spans == "candidates"
        candidate_scores, kept, scores, embeddings = self.span_scorer.top_spans(
            hidden, starts, ends, k, candidate_gradients=with_loss and over_candidates
        )  # [candidates], [k], [k], [k, D]
        mention_loss = None
        if with_loss:
            if over_candidates:
                loss_starts, loss_ends, loss_scores = starts, ends, candidate_scores
            else:
                loss_starts, loss_ends, loss_scores = starts[kept], ends[kept], scores
            mention_loss = config.mention_loss_coef * gold_mention_loss(
                loss_starts + offset, loss_ends + offset, loss_scores, document.gold_starts, document.gold_ends
            )
        return starts[kept], ends[kept], embeddings, scores, mention_loss

    def pair_scores(
        self,
        memory: EntityMemory,
        mention: torch.Tensor,
        span: Span,
        features: PairFeatures,
        weights: tuple[torch.Tensor, ...] | None = None,
        mention_projection: torch.Tensor | None = None,
        mention_source: torch.Tensor | None = None,
        required: Sequence[int] = (),
        base: BaseScores | None = None,
        batch_columns: list[torch.Tensor] | None = None,
        floor: float | None = None,
    ) -> torch.Tensor:
        """PAIRSCORE(m, e) for every column of ``memory.columns()``, unscored ones -inf: ``[num_columns]``.

        With ``max_top_entities`` K and more columns than K, only the K columns with the best
        coarse score (and the ``required`` columns: the gold ones in training) go through the
        fine FFNN; the others are -inf.

        With ``score: calibrated`` each column also gets the entity's prior (s_m of its most
        recent mention) and the coarse term ``mention_source . e``.
        ``weights``: the pair scorer's ``first_layer_parts()``, split once per segment;
        ``mention_projection``: the mention's target projection ``[ffnn]``;
        ``mention_source``: ``src_projection(m)`` ``[D]`` (calibrated only);
        ``base``: the mention's scores against the base rows from ``base_scores`` (None: scored here);
        ``batch_columns``: a list that receives ``[num_columns]``: each column's column in ``base_scores``'
        pass where its score was taken from it, else -1 (for the loss, ``SegmentLoss``);
        ``floor`` (inference with ``min_coarse_score``, ``coarse_floors``): a column whose coarse score
        (the entity's prior + the bilinear term) is at most this is -inf, not scored by the fine FFNN.
        """
        weights = weights or self.pair_scorer.first_layer_parts()
        if mention_projection is None:
            mention_projection = self.pair_scorer.project_targets(mention[None], weights)[0]
        if self.uses_coarse and mention_source is None:
            mention_source = self.src_projection(mention)
        context = (memory, mention, mention_projection, mention_source, span, features, weights, floor)
        limit = self.config.max_top_entities
        num_columns = len(memory.base_ids) + len(memory.fresh_ids)
        if limit is not None and base is not None and base.own_fine is not None:  # fresh columns stacked if needed
            return self._prefiltered_scores(
                memory, None, context, min(limit, num_columns), required, base, batch_columns
            )
        fresh = memory.fresh_tensors()  # [num_fresh, D], [num_fresh, ffnn], [num_fresh]
        if limit is not None and num_columns > limit:
            return self._prefiltered_scores(memory, fresh, context, limit, required, base, batch_columns)
        if batch_columns is not None:  # every base row from base_scores, when given
            from_batch = torch.full((num_columns,), -1, dtype=torch.long, device=mention.device)
            if base is not None:
                from_batch[: len(memory.base_ids)] = torch.arange(len(memory.base_ids), device=mention.device)
            batch_columns.append(from_batch)
        parts = []
        if memory.base_ids:
            if base is None:
                scores = self._score_against(
                    memory.base_embeddings, memory.base_projections, memory.base_priors, memory.base_ids, *context
                )  # [num_base]
            else:  # every base row was scored: no pre-filter, or no more base entities than K
                scores = base.fine  # [num_base]
            parts.append(scores)
        if fresh is not None:
            parts.append(self._score_against(*fresh, memory.fresh_ids, *context))  # [num_fresh]
        return memory.mask_unscored(torch.cat(parts))

    def _score_against(
        self,
        entities: torch.Tensor,
        projections: torch.Tensor,
        priors: torch.Tensor,
        ids: list[int],
        memory: EntityMemory,
        mention: torch.Tensor,
        mention_projection: torch.Tensor,
        mention_source: torch.Tensor | None,
        span: Span,
        features: PairFeatures,
        weights: tuple[torch.Tensor, ...],
        floor: float | None = None,
    ) -> torch.Tensor:
        """``pair_scores`` of one mention against the entities ``ids`` (``entities`` ``[E, D]``): ``[E]``;
        with a ``floor`` (``pair_scores``) the entities at or below it by coarse score are -inf, unscored."""
        above = None  # with a floor: the rows above it, the only ones scored
        if floor is not None:
            above = (self._coarse(entities, priors, mention_source) > floor).nonzero().squeeze(1)  # [E']
            if above.numel() == len(ids):
                above = None
            else:
                floored = torch.full((len(ids),), float("-inf"), device=mention.device)  # [E]
                if not above.numel():
                    return floored
                entities, projections, priors = entities[above], projections[above], priors[above]
                ids = [ids[row] for row in above.tolist()]
        device = mention.device
        anchors = features.locate([memory.anchor(column_id) for column_id in ids], device).unsqueeze(0)  # [1, E, 2]
        index = torch.arange(len(ids), device=device).unsqueeze(0)  # [1, E]
        scores = self.pair_scorer.scores(
            mention.unsqueeze(0),
            entities,
            index,
            features(self.pair_scorer, features.locate([span], device), anchors),
            candidate_projection=projections,
            parts=weights,
            target_projection=mention_projection.unsqueeze(0),
        ).squeeze(0)  # [E]
        if self.config.score == "calibrated":  # the baseline's s_m(j) and coarse terms
            scores = scores + priors + (entities @ mention_source).float()
        return scores if above is None else floored.index_copy(0, above, scores)

    @staticmethod
    def _coarse(entities: torch.Tensor, priors: torch.Tensor, mention_source: torch.Tensor) -> torch.Tensor:
        """The pre-filter's ranking score of one mention against ``entities`` ``[E, D]``: ``[E]``."""
        return (entities @ mention_source).float() + priors

    def _prefiltered_scores(
        self,
        memory: EntityMemory,
        fresh: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
        context: tuple,
        limit: int,
        required: Sequence[int],
        base: BaseScores | None = None,
        batch_columns: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """``pair_scores`` through the coarse pre-filter: the fine FFNN on ``limit`` columns (+ ``required``).

        ``fresh``: ``memory.fresh_tensors()`` (None: stacked here if a fresh column needs the fine FFNN).
        With ``base`` the chosen base rows it holds take their score from it, and so do the fresh
        slots of the segment's own spans (``BaseScores.own_fine``, with their coarse score); the
        other chosen columns go through the fine FFNN here.
        """
        mention_source = context[3]
        num_base = len(memory.base_ids)
        own = base is not None and base.own_fine is not None
        own_rows = base.own_rows.of_fresh(memory) if own else None  # [num_fresh]: with mention columns only
        with torch.no_grad():
            coarse = []
            if num_base:
                coarse.append(
                    self._coarse(memory.base_embeddings, memory.base_priors, mention_source)
                    if base is None
                    else base.coarse
                )
            if memory.fresh_ids:
                if own:  # from base_scores: every fresh slot is one of the segment's spans
                    coarse.append(base.own_coarse[own_rows.clamp(min=0)].masked_fill(own_rows < 0, float("-inf")))
                else:
                    fresh = fresh if fresh is not None else memory.fresh_tensors()
                    coarse.append(self._coarse(fresh[0], fresh[2], mention_source))
            coarse = torch.cat(coarse)  # [C]
            # With own: the base rows' unscored columns are -inf since base_scores, the fresh representations above.
            coarse = memory.mask_superseded(coarse) if own else memory.mask_unscored(coarse)
            live = coarse > float("-inf")  # [C]: the columns not superseded
            if required:
                coarse = coarse.index_fill(0, torch.tensor(list(required), device=coarse.device), float("inf"))
            chosen = torch.topk(coarse, limit).indices  # [K]
            if required:
                chosen = torch.cat([chosen, torch.tensor(list(required), device=chosen.device)])
            chosen = torch.unique(chosen[live[chosen]])  # sorted: base rows first; superseded ones stay -inf
            looked_up = chosen[:0]  # the chosen base rows ``base`` holds
            if base is not None:
                split = int((chosen < num_base).sum())
                looked_up, chosen = chosen[:split], chosen[split:]
                if base.known is not None:  # the others are scored on demand
                    held = base.known[looked_up]
                    looked_up, chosen = looked_up[held], torch.cat([looked_up[~held], chosen])
            own_columns = own_positions = None  # fresh slots of this segment's spans, scored at its start
            if own:
                own_columns, own_positions, found = self._own_columns(chosen, num_base, own_rows, base)
                chosen = chosen[~found]
        scores = coarse.new_full(coarse.shape, float("-inf"))  # [C]
        if chosen.numel():
            if fresh is None and bool((chosen >= num_base).any()):
                fresh = memory.fresh_tensors()
            fine = self._score_against(*self._columns(memory, fresh, chosen), *context)  # [chosen]
            scores = scores.index_copy(0, chosen, fine)
        if looked_up.numel():
            scores = scores.index_copy(0, looked_up, base.fine[looked_up])
        if own and own_columns.numel():
            scores = scores.index_copy(0, own_columns, base.own_fine[own_positions])
        if batch_columns is not None:  # base rows first in base_scores' columns, then the segment's spans
            from_batch = torch.full(coarse.shape, -1, dtype=torch.long, device=coarse.device)  # [C]
            from_batch[looked_up] = looked_up
            if own:
                from_batch[own_columns] = num_base + own_positions
            batch_columns.append(from_batch)
        return scores

    @staticmethod
    def _own_columns(
        chosen: torch.Tensor, num_base: int, own_rows: torch.Tensor, base: BaseScores
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The ``chosen`` columns whose score ``base`` holds (slots of the segment's spans it scored): those
        columns, their rows among the segment's spans, and a mask over ``chosen``."""
        fresh = chosen >= num_base  # [chosen]
        rows = torch.full_like(chosen, -1)
        rows[fresh] = own_rows[chosen[fresh] - num_base]
        found = rows >= 0
        if base.own_known is not None:
            found &= base.own_known[rows.clamp(min=0)]
        return chosen[found], rows[found], found

    @staticmethod
    def _columns(
        memory: EntityMemory,
        fresh: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
        columns: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
        """The entities of some scoring columns (sorted): embeddings ``[n, D]``, projections, priors, ids."""
        num_base = len(memory.base_ids)
        split = int((columns < num_base).sum())  # the base rows come first
        parts = []  # (embeddings, projections, priors, rows) of the base, then the fresh entities
        if split:
            parts.append((memory.base_embeddings, memory.base_projections, memory.base_priors, columns[:split]))
        if split < columns.numel():
            parts.append((*fresh, columns[split:] - num_base))
        embeddings = torch.cat([part[0].index_select(0, part[3]) for part in parts])  # [n, D]
        projections = torch.cat([part[1].index_select(0, part[3]) for part in parts])  # [n, ffnn]
        priors = torch.cat([part[2].index_select(0, part[3]) for part in parts])  # [n]
        ids = [
            memory.base_ids[column] if column < num_base else memory.fresh_ids[column - num_base]
            for column in columns.tolist()
        ]
        return embeddings, projections, priors, ids

    def base_scores(
        self,
        memory: EntityMemory,
        spans: Sequence[Span],
        embeddings: torch.Tensor,
        target_projections: torch.Tensor,
        candidate_projections: torch.Tensor,
        sources: torch.Tensor | None,
        mention_scores: torch.Tensor,
        features: PairFeatures,
        weights: tuple[torch.Tensor, ...],
        gold: GoldAntecedents | None = None,
        floors: torch.Tensor | None = None,
    ) -> tuple[list[BaseScores], torch.Tensor]:
        """Each of a segment's spans against the entities at its start (``memory.base_*``), in one pass.

        The same values as ``pair_scores`` gives against the base rows before any is superseded:
        every ``[k, B]`` pair, or with ``max_top_entities`` K below B each span's K best rows by
        coarse score. With mention columns only and K, the segment's earlier spans (the slots they
        will be) compete for the K with the base rows (``BaseScores.own_fine``).
        ``embeddings``, ``target_projections``, ``candidate_projections``, ``sources``,
        ``mention_scores``: the spans' ``[k, .]``. In training the scores are part of the segment's graph:
        the second value is all of them, ``[k, T]`` (-inf where not computed), which the loss reads.
        ``gold`` (training): each span's gold base rows (``gold_columns``) are computed here first, then its best
        other columns by coarse score: the decisions require them, and would otherwise score them on demand, one
        span at a time. The values are the same either way; only where they are computed changes.
        ``floors`` (inference with ``min_coarse_score``): each span's ``coarse_floors``; a pair whose coarse
        score is at most its span's floor is -inf, not scored by the fine FFNN.
        """
        k, num_base = len(spans), len(memory.base_ids)
        device = embeddings.device
        limit = self.config.max_top_entities
        calibrated = self.config.score == "calibrated"
        own = self.scores_own_spans
        located = features.locate(spans, device)  # [k, 2]
        tables = [[], [], [], []]  # embeddings, projections, priors, anchors of the candidate rows
        if num_base:
            base_anchors = features.locate([memory.anchor(column_id) for column_id in memory.base_ids], device)
            for table, part in zip(
                tables, (memory.base_embeddings, memory.base_projections, memory.base_priors, base_anchors), strict=True
            ):
                table.append(part)
        if own:  # the segment's spans as the mention columns they become
            for table, part in zip(tables, (embeddings, candidate_projections, mention_scores, located), strict=True):
                table.append(part)
        candidates, projections, priors, anchors = (torch.cat(table) for table in tables)  # [T, .], T = B (+ k)
        total = candidates.shape[0]
        anchors = anchors.unsqueeze(0).expand(k, total, 2)  # [k, T, 2]
        bilinear = coarse = None
        if self.uses_coarse:
            with torch.set_grad_enabled(torch.is_grad_enabled() and calibrated):
                bilinear = (sources @ candidates.T).float()  # [k, T]: the coarse term
        if limit is not None:
            with torch.no_grad():
                coarse = memory.mask_unscored(bilinear[:, :num_base] + memory.base_priors) if num_base else None
                if own:  # a span's own and later spans are no columns yet: -inf
                    earlier = torch.ones(k, k, dtype=torch.bool, device=device).tril(-1)  # [k, k]: j < i
                    own_coarse = (bilinear[:, num_base:] + mention_scores.float()).masked_fill(~earlier, float("-inf"))
                    coarse = own_coarse if coarse is None else torch.cat([coarse, own_coarse], dim=1)  # [k, T]
        scored = None if limit is None else limit + math.ceil(limit * PREFILTER_MARGIN)
        if scored is None or scored >= total:
            index = torch.arange(total, device=device).expand(k, total)  # [k, T]
        else:
            ranking = coarse
            if gold is not None:  # gold columns first (scored ones only: their coarse score is finite)
                ranking = coarse.masked_fill(self.gold_columns(memory, spans, gold, total).to(device), float("inf"))
            index = torch.topk(ranking, scored, dim=1).indices  # [k, K + margin]
            anchors = anchors.gather(1, index.unsqueeze(2).expand(-1, -1, 2))  # [k, K + margin, 2]
        phi = features(self.pair_scorer, located, anchors)  # [k, T or K + margin, F]
        scored_pairs = None  # [k, T or K + margin]: with floors, the pairs above them
        if floors is not None:
            scored_pairs = priors[index] + bilinear.gather(1, index) > floors.unsqueeze(1)
        # In chunks of spans: the fine FFNN's [spans, T, ffnn] input stays within BASE_SCORE_CHUNK_ELEMENTS,
        # so inference memory does not grow with the number of active entities times the spans.
        width = index.shape[1] * (self.span_dim + self.config.ffnn_size)
        step = max(1, BASE_SCORE_CHUNK_ELEMENTS // max(1, width))
        chunks = []
        for first in range(0, k, step):
            rows = slice(first, first + step)
            arguments = (embeddings[rows], candidates, index[rows], phi[rows] if phi is not None else None)
            projected = {
                "candidate_projection": projections,
                "parts": weights,
                "target_projection": target_projections[rows],
            }
            if scored_pairs is None:
                chunks.append(self.pair_scorer.scores(*arguments, **projected))
            else:
                chunks.append(self.pair_scorer.scores_where(scored_pairs[rows], *arguments, **projected))
        fine = torch.cat(chunks)  # [k, T] or [k, K + margin]
        if calibrated:  # as _score_against adds them
            fine = fine + priors[index] + bilinear.gather(1, index)
        known = None
        if index.shape[1] < total:  # spread into [k, T]; the rows not computed stay -inf
            fine = fine.new_full((k, total), float("-inf")).scatter(1, index, fine)
            known = torch.zeros(k, total, dtype=torch.bool, device=device).scatter(1, index, True)
        # unbind: one backward node for all the rows (indexing row by row would add a [k, T] gradient each).
        rows = fine[:, :num_base].unbind(0)
        known_rows = known[:, :num_base].unbind(0) if known is not None else [None] * k
        coarse_rows = coarse[:, :num_base].unbind(0) if coarse is not None else [None] * k
        if not own:
            return [BaseScores(*row) for row in zip(rows, known_rows, coarse_rows, strict=True)], fine
        own_rows = OwnRows(spans, device)
        own_fine = fine[:, num_base:].unbind(0)
        own_known = known[:, num_base:].unbind(0) if known is not None else [None] * k
        own_coarse = coarse[:, num_base:].unbind(0)
        return [
            BaseScores(*row, own_fine=own_scores, own_known=own_held, own_coarse=own_ranks, own_rows=own_rows)
            for *row, own_scores, own_held, own_ranks in zip(
                rows, known_rows, coarse_rows, own_fine, own_known, own_coarse, strict=True
            )
        ], fine

    @staticmethod
    def gold_columns(memory: EntityMemory, spans: Sequence[Span], gold: GoldAntecedents, width: int) -> torch.Tensor:
        """Which of ``base_scores``' ``width`` columns each span will have as gold options among the base rows:
        ``[k, width]`` bool on the host, the scored columns (``EntityMemory.scored_columns``: base rows, at the
        segment's start) of the entities holding an earlier mention of its gold cluster
        (``GoldAntecedents.target_ids``). (The segment's own spans are not: which entity each joins is decided
        later.)"""
        found = torch.zeros(len(spans), width, dtype=torch.bool, device=torch.device("cpu"))  # [k, width]
        for position, span in enumerate(spans):
            columns = memory.scored_columns(gold.target_ids(span, memory, True))
            if columns:
                found[position, columns] = True
        return found

    @property
    def scores_own_spans(self) -> bool:
        """Whether ``base_scores`` also scores a segment's spans against its earlier ones: with mention columns
        only (fixed once made) and the pre-filter, whose K they compete for."""
        config = self.config
        return config.max_top_entities is not None and config.recent_mentions > 0 and not config.entity_representation

    def update_weight(self, entity: torch.Tensor, mention: torch.Tensor, size: int) -> torch.Tensor | float:
        """UPDATE's ``a`` in ``e <- a e + (1 - a) m``: ``sigmoid(FFNN([e; m]))``, or ``size / (size + 1)`` (mean).

        The pair scorer's candidate projection is linear, so it updates with the same ``a``.
        """
        if self.config.update == "mean":
            return size / (size + 1)
        return torch.sigmoid(self.alpha(torch.cat([entity, mention]))).squeeze(0)  # scalar

    def sampled_spans(self, spans: Sequence[Span], gold: GoldAntecedents) -> list[int]:
        """The rows of the spans a training pass reads: every gold span and, with ``negative_sample_rate`` r < 1,
        each other span with probability r (one host-side draw per span, made before any is read, so that
        the segment's batched pass scores only these)."""
        rate = self.config.negative_sample_rate
        if rate >= 1.0:
            return list(range(len(spans)))
        draws = torch.rand(len(spans), device="cpu").tolist()
        return [index for index, span in enumerate(spans) if draws[index] < rate or gold.is_gold(span)]

    def coarse_floors(self, mention_scores: torch.Tensor) -> torch.Tensor | None:
        """At inference with ``min_coarse_score`` F, each span's least coarse score (prior + bilinear) for a column
        to go through the fine FFNN: ``F - s_m(m)`` ``[k]``, so that a pair's whole coarse score s_m(m) + s_m(j) +
        bilinear must exceed F, as the baseline's floor; None in training or without the setting."""
        if self.training or self.config.min_coarse_score is None:
            return None
        return self.config.min_coarse_score - mention_scores.detach().float()

    def may_start_entity(self, mention_score: torch.Tensor) -> bool:
        """False for a span too unlikely a mention to start an entity (``min_mention_score``; it may join one)."""
        threshold = self.config.min_mention_score
        return threshold is None or float(mention_score.detach()) >= threshold

    def resolve_spans(
        self,
        memory: EntityMemory,
        starts: Sequence[int],
        ends: Sequence[int],
        embeddings: torch.Tensor,
        mention_scores: torch.Tensor,
        features: PairFeatures,
        gold: GoldAntecedents | None = None,
        train: bool = False,
    ) -> torch.Tensor | None:
        """Greedy decisions for spans in order (global subtoken offsets); the summed loss when ``train``.

        With ``batch_per_segment`` in training the segment's batched pass (``base_scores``) runs with
        gradients, the decisions are made without, and the segment's loss is computed afterwards
        (``SegmentLoss``) over the options each span had: those the batched pass scored are read from
        its graph, the few scored on demand go through the fine FFNN again in one pass. The same loss
        and gradients as span by span, with one or two weight gradients of the fine FFNN per segment
        instead of one per span. (With dropout, the options scored on demand see other dropout masks
        in the loss than in the decisions; the batched pass's are the same.)
        Training reads every gold span and the non-gold ones ``sampled_spans`` keeps.
        """
        config = self.config
        weights = self.pair_scorer.first_layer_parts()
        if memory.base_embeddings is not None and torch.is_grad_enabled() and weights[1].requires_grad:
            memory.base_projections = self.pair_scorer.project_candidates(memory.base_embeddings, weights)
        target_projections = self.pair_scorer.project_targets(embeddings, weights)  # [k, ffnn]
        candidate_projections = self.pair_scorer.project_candidates(embeddings, weights)  # [k, ffnn]
        sources = self.src_projection(embeddings) if self.uses_coarse else None  # [k, D]
        spans = list(zip(starts, ends, strict=True))
        read = self.sampled_spans(spans, gold) if train and gold is not None else list(range(len(spans)))
        floors = self.coarse_floors(mention_scores)  # [k] or None
        base = batch = None  # each read span's scores against the entities at the segment's start, all of them
        if config.batch_per_segment and (memory.base_ids or self.scores_own_spans) and read:
            rows = torch.tensor(read, dtype=torch.long, device=embeddings.device) if len(read) < len(spans) else None
            # In training the loss reads the options it scored from its graph (SegmentLoss).
            base, batch = self.base_scores(
                memory,
                [spans[index] for index in read],
                *(
                    tensor if rows is None or tensor is None else tensor.index_select(0, rows)
                    for tensor in (
                        embeddings,
                        target_projections,
                        candidate_projections,
                        sources,
                        mention_scores,
                    )
                ),
                features,
                weights,
                gold if train else None,
                floors if rows is None or floors is None else floors.index_select(0, rows),
            )
        replay = SegmentLoss(memory, batch) if train and gold is not None and config.batch_per_segment else None
        loss = None
        span_floors = floors.tolist() if floors is not None else [None] * len(spans)
        for position, index in enumerate(read):
            span = spans[index]
            mention = embeddings[index]  # [D]
            if len(memory) == 0:
                if self.may_start_entity(mention_scores[index]):
                    memory.add(mention, candidate_projections[index], span, mention_scores[index])
                    if replay is not None:
                        replay.new_versions(memory, memory.changed)
                continue
            columns = memory.columns()
            gold_columns = [0]  # logits columns of the gold options (0: a new entity)
            if train and gold is not None:
                targets = gold.target_ids(span, memory, config.loss == "all_antecedents")
                # Every scored column of the gold entities (an updated base entity's superseded row is not).
                gold_columns = [column + 1 for column in memory.scored_columns(targets)] or [0]
            source = sources[index] if sources is not None else None
            required = [column - 1 for column in gold_columns if column > 0]  # the pre-filter keeps them
            batch_columns = [] if replay is not None and base is not None else None
            with torch.set_grad_enabled(torch.is_grad_enabled() and replay is None):
                scores = self.pair_scores(
                    memory,
                    mention,
                    span,
                    features,
                    weights,
                    target_projections[index],
                    source,
                    required,
                    base[position] if base is not None else None,
                    batch_columns,
                    span_floors[index],
                )  # [columns]
                scores = scores + mention_scores[index]
                logits = torch.cat([scores.new_full((1,), config.threshold), scores])  # [columns + 1], 0: new
            choice = int(logits.detach().argmax())
            if train and gold is not None:
                if replay is not None:
                    from_batch = batch_columns[0] if batch_columns else None
                    finite = torch.isfinite(scores)
                    replay.record(memory, index, span, finite, gold_columns, features, position, from_batch)
                else:
                    span_loss = torch.logsumexp(logits, 0) - torch.logsumexp(logits[gold_columns], 0)
                    loss = span_loss if loss is None else loss + span_loss
                if (
                    config.teacher_forcing_rate > 0
                    and float(torch.rand((), device="cpu")) < config.teacher_forcing_rate
                ):
                    choice = gold_columns[0]
            if choice == 0:
                if self.may_start_entity(mention_scores[index]):
                    memory.add(mention, candidate_projections[index], span, mention_scores[index])
                    if replay is not None:
                        replay.new_versions(memory, memory.changed)
            else:
                entity_id = memory.entity_of(columns[choice - 1])
                entity, projection = memory.embedding(entity_id)  # [D], [ffnn]
                if config.entity_representation:
                    alpha = self.update_weight(entity, mention, len(memory.mentions[entity_id]))
                    entity = alpha * entity + (1 - alpha) * mention
                    projection = alpha * projection + (1 - alpha) * candidate_projections[index]
                # else the representation is never scored: UPDATE is skipped (it would change nothing scored)
                memory.update(
                    entity_id,
                    entity,
                    projection,
                    span,
                    mention_scores[index],
                    (mention, candidate_projections[index]),
                )
                if replay is not None:
                    replay.new_versions(memory, memory.changed)
        if replay is not None and replay.spans:
            loss = replay.loss(self, embeddings, target_projections, sources, mention_scores, features, weights)
        return loss

    # ---------------------------------------------------------------- forward
    def read_segments(
        self,
        document: DocumentTensors,
        segment_hidden: Callable[[int], torch.Tensor] | None = None,
        train: bool = False,
    ) -> Generator[torch.Tensor, None, IncrementalOutput]:
        """Read the document segment by segment; yield each segment's loss, return the output.

        With ``train`` each segment's summed loss is yielded once its decisions are
        made (segments without a loss yield nothing). The caller backpropagates it
        before asking for the next segment: the entities are then detached
        (truncated backpropagation), so memory does not grow with the document.
        ``segment_hidden(i)`` may supply segment ``i``'s encoder output (a cache
        for a frozen encoder).
        """
        config = self.config
        memory = EntityMemory(config.recent_mentions, config.entity_representation)
        gold = GoldAntecedents(document) if train else None
        features = PairFeatures.of_document(document, config)
        lengths = document.attention_mask.sum(dim=1).tolist()  # [num_segments]
        total_loss: float | None = 0.0 if train else None
        kept_spans: list[Span] = []
        offset = 0
        for index, length in enumerate(lengths):
            hidden = segment_hidden(index) if segment_hidden is not None else self.encode_segment(document, index)
            starts, ends, embeddings, mention_scores, mention_loss = self.segment_spans(
                document, hidden, offset, train
            )  # [k] each
            global_starts = (starts + offset).tolist()
            global_ends = (ends + offset).tolist()
            for span in zip(global_starts, global_ends, strict=True):
                features.rank_of_span[span] = len(kept_spans)
                kept_spans.append(span)
            loss = self.resolve_spans(
                memory, global_starts, global_ends, embeddings, mention_scores, features, gold, train
            )
            if mention_loss is not None:
                loss = mention_loss if loss is None else loss + mention_loss
            if loss is not None:
                if loss.requires_grad:
                    yield loss
                total_loss += float(loss.detach())
            offset += length
            if train and not config.evict_in_training:
                memory.consolidate()
            else:
                memory.evict(offset, config.evict_singleton_distance, config.evict_distance)
        return IncrementalOutput(memory.clusters(), total_loss, memory, kept_spans)

    def forward(
        self, document: DocumentTensors, segment_hidden: Callable[[int], torch.Tensor] | None = None
    ) -> IncrementalOutput:
        """The model's decisions on a whole document (inference: no loss is backpropagated)."""
        reader = self.read_segments(document, segment_hidden)
        while True:
            try:
                next(reader)
            except StopIteration as finished:
                return finished.value

    def training_losses(
        self, document: DocumentTensors, segment_hidden: Callable[[int], torch.Tensor] | None = None
    ) -> Iterator[torch.Tensor]:
        """Each segment's training loss in turn, to be backpropagated before the next is computed."""
        yield from self.read_segments(document, segment_hidden, train=True)


def copy_baseline_weights(model: ReferenceIncrementalModel, baseline_state: dict[str, torch.Tensor]) -> list[str]:
    """Copy the encoder, span scorer and pair scorer weights from a baseline state dict, by name.

    Returns the names copied. A weight of another shape is an error naming it and
    both shapes; the update network (``alpha``) is new and stays as initialised.
    """
    own = model.state_dict()
    copied = []
    mismatched = []
    missing = []
    for name, tensor in own.items():
        if not name.startswith(("encoder.", "span_scorer.", "pair_scorer.", "src_projection.")):
            continue
        if name not in baseline_state:
            missing.append(name)
            continue
        if baseline_state[name].shape != tensor.shape:
            mismatched.append(f"{name}: baseline {tuple(baseline_state[name].shape)}, configured {tuple(tensor.shape)}")
            continue
        copied.append(name)
    if mismatched or missing:
        details = "; ".join(mismatched + [f"{name}: not in the baseline" for name in missing])
        raise ValueError(f"the baseline's weights do not fit the incremental model's configuration ({details})")
    with torch.no_grad():
        for name in copied:
            own[name].copy_(baseline_state[name])
    logger.info("Copied %d weights from the baseline; the update network is new", len(copied))
    return copied
