"""The gold options of the incremental model's training decisions."""

from __future__ import annotations

import torch

from coref_pipeline.models.document import DocumentTensors
from coref_pipeline.models.incremental.memory import EntityMemory, Span


class GoldAntecedents:
    """For each gold mention, the earlier mentions of its cluster (most recent first)."""

    def __init__(self, document: DocumentTensors) -> None:
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
            if entity_id is not None and entity_id in memory.active and entity_id not in found:
                found.append(entity_id)
            if not all_antecedents:
                break
        return found
