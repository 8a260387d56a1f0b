"""Model predictions (subtoken spans) -> word-level clusters for a CoNLL-2012 response file.

Write the result with ``coref_pipeline.conll.write_conll_response``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from coref_pipeline.evaluation.metrics import Cluster, Span

logger = logging.getLogger(__name__)


def subtoken_to_word_clusters(
    clusters: Sequence[Sequence[Sequence[int]]], subtoken_map: Sequence[int]
) -> list[Cluster]:
    """Map inclusive subtoken spans to word spans through ``subtoken_map``.

    ``(start, end)`` becomes ``(subtoken_map[start], subtoken_map[end])``. A word
    span already produced (in this or an earlier cluster) is dropped, so the
    first occurrence wins; clusters left empty are dropped; order is kept.
    """
    seen: set[Span] = set()
    word_clusters: list[Cluster] = []
    for cluster in clusters:
        word_cluster: list[Span] = []
        for start, end in cluster:
            span = (int(subtoken_map[start]), int(subtoken_map[end]))
            if span in seen:
                logger.debug("Dropping repeated word span %s (from subtokens %s-%s)", span, start, end)
                continue
            seen.add(span)
            word_cluster.append(span)
        if word_cluster:
            word_clusters.append(word_cluster)
    return word_clusters
