"""The entity memory: which entities are active, their scoring columns, and eviction.

The bookkeeping is the host's (lists and dicts, a few operations per decision, no tensor read). The
columns' vectors are rows of tables on the device: between segments the base table (``base_embeddings``,
``base_projections``, ``base_priors``, detached), during a segment a ``SegmentTable`` (the base rows, the
segment's read spans, then the versions its entity updates made), from which ``end_segment`` gathers the
next base table in one pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

Span = tuple[int, int]


class SegmentTable:
    """The vectors of every column one segment can hold, as rows.

    Rows ``[0, B)`` are the memory's base rows at the segment's start (detached), rows ``[B, B + n)`` the
    segment's read spans in reading order (each the new entity or the mention slot it may become: a mention's
    own embedding, projection and score), and rows from ``B + n`` on the versions entity updates make in the
    segment (``add_version``: tensors of the segment's graph in training), at most one per read span.
    """

    def __init__(
        self,
        memory: EntityMemory,
        embeddings: torch.Tensor,
        projections: torch.Tensor,
        priors: torch.Tensor,
    ) -> None:
        """``embeddings`` ``[n, D]``, ``projections`` ``[n, ffnn]`` (the pair scorer's candidate part) and
        ``priors`` ``[n]`` (mention scores) of the segment's read spans."""
        self.num_base = len(memory.base_ids)
        self.num_spans = embeddings.shape[0]
        self.base = (memory.base_embeddings, memory.base_projections, memory.base_priors)
        self.spans = (embeddings, projections, priors)
        self.versions: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # each ([D], [ffnn], scalar)
        self.joined: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # static(), once computed

    @property
    def num_static(self) -> int:
        """Rows whose vectors are known at the segment's start: the base rows and the read spans."""
        return self.num_base + self.num_spans

    @property
    def width(self) -> int:
        """Rows the segment can have: the static ones and one version per read span."""
        return self.num_static + self.num_spans

    def span_row(self, position: int) -> int:
        """The row of the read span at ``position`` (reading order)."""
        return self.num_base + position

    def add_version(self, embedding: torch.Tensor, projection: torch.Tensor, prior: torch.Tensor) -> int:
        """A new representation (``[D]``, ``[ffnn]``, a scalar): its row."""
        self.versions.append((embedding, projection, prior))
        return self.num_static + len(self.versions) - 1

    def vectors(self, row: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One row's embedding ``[D]``, projection ``[ffnn]`` and prior (a scalar)."""
        if row < self.num_base:
            return tuple(part[row] for part in self.base)
        if row < self.num_static:
            return tuple(part[row - self.num_base] for part in self.spans)
        return self.versions[row - self.num_static]

    def static(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The static rows' embeddings ``[B + n, D]``, projections ``[B + n, ffnn]`` and priors ``[B + n]`` (joined
        once)."""
        if self.joined is None:
            self.joined = self.spans
            if self.num_base:
                self.joined = tuple(torch.cat([base, own]) for base, own in zip(self.base, self.spans, strict=True))
        return self.joined

    def gather(self, rows: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """The rows' vectors, detached, in one gather per table: ``[len(rows), D]``, ``[.., ffnn]``, ``[..]``."""
        if not rows:
            return None
        parts = [list(self.static())]
        if self.versions:
            parts.append([torch.stack(column) for column in zip(*self.versions, strict=True)])
        device = parts[0][0].device
        index = torch.tensor(rows, dtype=torch.long, device=torch.device("cpu"))
        index = index if device.type == "cpu" else index.to(device)
        columns = [[part[column] for part in parts] for column in range(3)]
        return tuple(
            (torch.cat(column) if len(column) > 1 else column[0]).detach().index_select(0, index) for column in columns
        )


@dataclass
class EntityMemory:
    """Active entities and evicted ones (mention lists only), and the scoring columns of the active ones.

    Each scoring column is an entity's representation or, with ``recent_mentions`` M > 0, one of its M most
    recent mentions (a *slot*: the mention's embedding, projection and score, as the baseline holds an
    antecedent). Columns have ids: an entity's id, or a slot's, whose ``owner`` is its entity. With
    ``score_representations`` false the representation columns are held but never scored.

    Within a segment the columns as they were at its start (the base rows, ``base_ids``) are kept apart from
    those added or given a new version in it (``fresh_ids``, each with its row of the segment's
    ``SegmentTable``); ``end_segment`` merges them. Columns are ordered ``base_ids + fresh_ids``, base rows that
    have a fresh version (or were dropped) ``superseded``: the order the decisions break ties in.
    """

    recent_mentions: int = 0
    score_representations: bool = True
    base_embeddings: torch.Tensor | None = None  # [num_base, span_dim]
    base_projections: torch.Tensor | None = None  # [num_base, ffnn]: the pair scorer's candidate part
    base_priors: torch.Tensor | None = None  # [num_base]: s_m of the column's (most recent) mention
    base_ids: list[int] = field(default_factory=list)
    superseded: set[int] = field(default_factory=set)  # base rows with a fresh version, or dropped
    fresh_ids: list[int] = field(default_factory=list)
    fresh_rows: list[int] = field(default_factory=list)  # each fresh column's row of the SegmentTable
    # Changes of the fresh columns other than appends (a row replaced, a column gone): a reader of ``live_fresh``
    # that extends what it read while this count stands reads what a new call gives.
    fresh_changes: int = 0
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
    base_row: dict[int, int] = field(default_factory=dict)  # column id -> its row in base_ids
    table: SegmentTable | None = None  # the current segment's (begin_segment), whose rows fresh_rows are

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

    def is_scored(self, column_id: int) -> bool:
        """Whether a column is ever scored: a slot, or a representation with ``score_representations``."""
        return self.score_representations or column_id in self.owner

    def row_of(self, column_id: int) -> int:
        """The ``SegmentTable`` row holding an active column's current vectors."""
        if column_id in self.fresh_ids:
            return self.fresh_rows[self.fresh_ids.index(column_id)]
        return self.base_row[column_id]

    def begin_segment(self, embeddings: torch.Tensor, projections: torch.Tensor, priors: torch.Tensor) -> SegmentTable:
        """Start a segment whose read spans are ``embeddings`` ``[n, D]``, ``projections`` ``[n, ffnn]`` and
        ``priors`` ``[n]`` (their mention scores): its table."""
        self.table = SegmentTable(self, embeddings, projections, priors)
        return self.table

    def masked_columns(self, num_columns: int) -> list[int]:
        """The first ``num_columns`` columns that are not scored: superseded base rows and, with
        ``score_representations`` false, representations."""
        rows = set(self.superseded)
        if not self.score_representations:
            rows.update(row for row, column_id in enumerate(self.base_ids) if column_id not in self.owner)
            num_base = len(self.base_ids)
            fresh = self.fresh_ids[: max(0, num_columns - num_base)]
            rows.update(num_base + position for position, column_id in enumerate(fresh) if column_id not in self.owner)
        return sorted(row for row in rows if row < num_columns)

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

    def live_base(self) -> tuple[list[int], list[int]]:
        """The base rows scored and not superseded, in order, and the entity of each."""
        rows = [
            row
            for row, column_id in enumerate(self.base_ids)
            if row not in self.superseded and self.is_scored(column_id)
        ]
        return rows, [self.entity_of(self.base_ids[row]) for row in rows]

    def live_fresh(self, first: int = 0) -> tuple[list[int], list[int]]:
        """The fresh columns scored, in order: their ``SegmentTable`` rows and the entity of each; ``first``: from
        that position of ``fresh_ids`` on."""
        # is_scored and entity_of inlined: this runs for every read span
        owner, every = self.owner, self.score_representations
        live = [
            (row, owner.get(column_id, column_id))
            for column_id, row in zip(self.fresh_ids[first:], self.fresh_rows[first:], strict=True)
            if every or column_id in owner
        ]
        return [row for row, _ in live], [entity for _, entity in live]

    def _set_fresh(self, column_id: int, row: int) -> None:
        """Give a column a fresh version, held in ``row`` (a new column, or a base row superseded)."""
        if column_id in self.fresh_ids:
            position = self.fresh_ids.index(column_id)
            if self.fresh_rows[position] != row:
                self.fresh_rows[position] = row
                self.fresh_changes += 1
            return
        if column_id in self.base_row:
            self.superseded.add(self.base_row[column_id])
        self.fresh_ids.append(column_id)
        self.fresh_rows.append(row)

    def _add_slot(self, entity_id: int, span: Span, row: int) -> int:
        """A slot for one of the entity's mentions (its id); the oldest slots beyond ``recent_mentions`` go."""
        slot_id = self.next_id
        self.next_id += 1
        self.owner[slot_id] = entity_id
        self.slot_span[slot_id] = span
        self.slots.setdefault(entity_id, []).append(slot_id)
        self._set_fresh(slot_id, row)
        while len(self.slots[entity_id]) > self.recent_mentions:
            self._drop_slot(self.slots[entity_id].pop(0))
        return slot_id

    def _drop_slot(self, slot_id: int) -> None:
        """A slot no longer scored; a base row stays (masked) until the segment's end."""
        if slot_id in self.fresh_ids:
            position = self.fresh_ids.index(slot_id)
            del self.fresh_ids[position], self.fresh_rows[position]
            del self.owner[slot_id], self.slot_span[slot_id]
            self.fresh_changes += 1
        else:
            self.superseded.add(self.base_row[slot_id])
            self.dropped.append(slot_id)

    def add(self, span: Span, row: int) -> int:
        """A new entity of one mention, ``span``, whose vectors are ``row`` (that mention's); its id.

        ``changed`` then holds the ids of the columns it created, the entity's own first.
        """
        entity_id = self.next_id
        self.next_id += 1
        self._set_fresh(entity_id, row)
        self.mentions[entity_id] = [span]
        self.entity_of_span[span] = entity_id
        self.active.add(entity_id)
        self.max_active = max(self.max_active, len(self.active))
        created = [entity_id]
        if self.recent_mentions and not self.score_representations:
            created.append(self._add_slot(entity_id, span, row))
        self.changed = created
        return entity_id

    def update(self, entity_id: int, span: Span, representation_row: int | None, mention_row: int) -> None:
        """``span`` joins the entity: its representation is now ``representation_row`` (None: kept as it is,
        when representations are not scored); ``mention_row``: the span's own vectors, for its slot
        (``recent_mentions``).

        ``changed`` then holds the ids of the columns created or changed. With scored representations an
        entity of one mention has no slot (its representation is that mention); it gets one for that
        first mention when a second joins.
        """
        changed = []
        if self.recent_mentions and self.score_representations and len(self.mentions[entity_id]) == 1:
            first = self.row_of(entity_id)  # not yet updated: the first mention's vectors
            changed.append(self._add_slot(entity_id, self.mentions[entity_id][0], first))
        self._set_fresh(entity_id, self.row_of(entity_id) if representation_row is None else representation_row)
        changed.append(entity_id)
        self.mentions[entity_id].append(span)
        self.entity_of_span[span] = entity_id
        if self.recent_mentions:
            changed.append(self._add_slot(entity_id, span, mention_row))
        self.changed = [column_id for column_id in changed if column_id in self.fresh_ids]

    def leaving(
        self, position: int, singleton_distance: int | None, distance: int | None, from_start: bool = False
    ) -> list[int]:
        """The active entities the eviction policy names at ``position`` (subtokens), in column order.

        An entity leaves when the midpoint of its most recent mention (``from_start``: its start, as the 2020
        code measures it) is more than ``distance`` subtokens before ``position``, or more than
        ``singleton_distance`` when it has a single mention. ``None`` switches a rule off.
        """
        found = []
        consolidated = [column_id for row, column_id in enumerate(self.base_ids) if row not in self.superseded]
        for column_id in consolidated + self.fresh_ids:
            if column_id in self.owner:
                continue  # a slot leaves with its entity
            start, end = self.mentions[column_id][-1]
            behind = position - (start if from_start else (start + end) / 2)
            single = len(self.mentions[column_id]) == 1
            if (distance is not None and behind > distance) or (
                singleton_distance is not None and single and behind > singleton_distance
            ):
                found.append(column_id)
        return found

    def end_segment(
        self,
        position: int | None = None,
        singleton_distance: int | None = None,
        distance: int | None = None,
        from_start: bool = False,
    ) -> list[int]:
        """End the segment: merge the fresh columns into the base ones, detached, and, with ``position``, evict the
        entities the policy names there (``leaving``; their mentions stay for the output): one gather of the table's
        rows. Returns the evicted entities' ids, in column order."""
        leaving = self.leaving(position, singleton_distance, distance, from_start) if position is not None else []
        gone = set(leaving)
        keep: list[tuple[int, int]] = []  # (column id, table row)
        for row, column_id in enumerate(self.base_ids):
            if row not in self.superseded and self.entity_of(column_id) not in gone:
                keep.append((column_id, row))
        keep += [
            (column_id, row)
            for column_id, row in zip(self.fresh_ids, self.fresh_rows, strict=True)
            if self.entity_of(column_id) not in gone
        ]
        if self.fresh_ids or self.superseded or gone:
            table = self.table if self.table is not None else SegmentTable(self, *self._empty_spans())
            gathered = table.gather([row for _, row in keep])
            self.base_embeddings, self.base_projections, self.base_priors = gathered or (None, None, None)
            self.base_ids = [column_id for column_id, _ in keep]
            self.base_row = {column_id: row for row, column_id in enumerate(self.base_ids)}
        for slot_id in self.dropped:
            del self.owner[slot_id], self.slot_span[slot_id]
        for entity_id in leaving:
            for slot_id in self.slots.pop(entity_id, []):
                del self.owner[slot_id], self.slot_span[slot_id]
        self.active -= gone
        self.evicted.extend(leaving)
        self.superseded, self.dropped, self.fresh_ids, self.fresh_rows = set(), [], [], []
        self.fresh_changes += 1
        self.table = None
        return leaving

    def _empty_spans(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """No read spans, for a table of the base rows alone."""
        embeddings, projections, priors = self.base_embeddings, self.base_projections, self.base_priors
        return embeddings[:0], projections[:0], priors[:0]

    def clusters(self, min_size: int = 2) -> list[list[Span]]:
        """Every entity (active or evicted) with at least ``min_size`` mentions, mentions sorted."""
        found = [sorted(mentions) for mentions in self.mentions.values() if len(mentions) >= min_size]
        return sorted(found)
