"""The gold options of the incremental model's training decisions."""

from __future__ import annotations

import torch

from coref_pipeline.models.document import DocumentTensors
from coref_pipeline.models.incremental.memory import EntityMemory, Span


class GoldAntecedents:
    """For each gold mention, the earlier mentions of its cluster (most recent first).

    With ``latest_only`` (``gold_entities: latest_mention``) an earlier mention finds its entity only as the 2020
    code's span-to-cluster map holds it: read in the current segment, or the most recent mention of an active
    entity when the last segment ended (``end_segment``).
    """

    def __init__(self, document: DocumentTensors, latest_only: bool = False) -> None:
        self.latest_only = latest_only
        self.segment_start = 0  # the current segment's first subtoken
        self.latest: set[Span] = set()  # each active entity's most recent mention as the last segment ended
        starts, ends, cluster_ids = torch.stack(
            [document.gold_starts, document.gold_ends, document.gold_cluster_ids]
        ).tolist()  # one read
        spans = list(zip(starts, ends, strict=True))
        self.cluster_of: dict[Span, int] = dict(zip(spans, cluster_ids, strict=True))
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
            if self.latest_only and antecedent[0] < self.segment_start and antecedent not in self.latest:
                entity_id = None
            if entity_id is not None and entity_id in memory.active and entity_id not in found:
                found.append(entity_id)
            if not all_antecedents:
                break
        return found

    def end_segment(self, memory: EntityMemory, next_start: int) -> None:
        """The segment ended (``memory`` already ended it) and the next starts at subtoken ``next_start``."""
        self.segment_start = next_start
        if self.latest_only:
            self.latest = {memory.mentions[entity_id][-1] for entity_id in memory.active}
