"""Model predictions (jsonlines documents with subtoken clusters) -> word-level clusters and their scores.

Write the word clusters as a response file with ``coref_pipeline.formats.conll.write_conll_response``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coref_pipeline.evaluation.metrics import CONLL_METRICS, Cluster, Span
from coref_pipeline.evaluation.scoring import CorpusScores, score_documents
from coref_pipeline.formats.conll import SCORER_READING, ConllFile, parse_conll_lines

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


def word_clusters(document: Mapping[str, Any], key: str = "predicted_clusters") -> list[Cluster]:
    """A jsonlines document's subtoken clusters (``key``) as word spans, through its ``subtoken_map``."""
    return subtoken_to_word_clusters(document[key], document["subtoken_map"])


@dataclass(frozen=True)
class GoldKey:
    """The key predictions are scored against: word-level gold clusters by ``doc_key``, and their source.

    ``evaluate`` and training-time dev evaluation both score against the gold CoNLL
    file read as the reference scorer reads it (``gold_key``), not
    against the jsonlines ``clusters``, which ``minimize.py`` has merged where two
    clusters share a mention.
    """

    clusters: Mapping[str, Sequence[Cluster]]
    source: str

    def restricted_to(self, doc_keys: Iterable[str]) -> GoldKey:
        """The key of these documents only (a dev subset); a document the key lacks is a ``ValueError``."""
        doc_keys = list(doc_keys)
        missing = [doc_key for doc_key in doc_keys if doc_key not in self.clusters]
        if missing:
            raise ValueError(f"{self.source} has no document {missing[0]!r} ({len(missing)} missing)")
        return GoldKey({doc_key: self.clusters[doc_key] for doc_key in doc_keys}, self.source)


def gold_key(gold: ConllFile) -> GoldKey:
    """The word-level clusters of every document of a gold CoNLL file, read as the reference scorer reads them."""
    documents = parse_conll_lines(gold.text.splitlines(), gold.path, **SCORER_READING)
    return GoldKey({document.doc_key: document.clusters for document in documents}, gold.path)


def score_predictions(
    predictions: Sequence[Mapping[str, Any]],
    remove_singletons: bool,
    metrics: Sequence[str] = CONLL_METRICS,
    key: GoldKey | None = None,
) -> CorpusScores:
    """Score the ``predicted_clusters`` of jsonlines documents at the word level.

    The key is ``key`` (the gold CoNLL file, as ``evaluate`` and training score) or,
    without it, each document's own ``clusters`` (for corpora without a CoNLL file).
    """
    response = {document["doc_key"]: word_clusters(document) for document in predictions}
    if key is None:
        own = {document["doc_key"]: word_clusters(document, "clusters") for document in predictions}
        key = GoldKey(own, "the gold clusters")
    return score_documents(
        key.clusters, response, metrics, remove_singletons=remove_singletons, key_source=key.source,
        response_source="the predictions",
    )  # fmt: skip


# The figures a user compares between runs (the DVC metrics files): CoNLL F1 and these metrics' F1.
HEADLINE_METRICS: tuple[str, ...] = ("muc", "bcub", "ceafe", "lea")


def headline_metrics(scores: CorpusScores) -> dict[str, float]:
    """CoNLL F1 and the F1 of each headline metric scored, in percent (4 decimals)."""
    headline = {"conll_f1": round(100 * scores.conll_f1, 4)} if scores.conll_f1 is not None else {}
    for name in HEADLINE_METRICS:
        if name in scores.metrics:
            headline[f"{name}_f1"] = round(100 * scores[name].f1, 4)
    return headline


def summary_metrics(scores: CorpusScores) -> dict[str, float]:
    """CoNLL F1 and each metric's recall, precision and F1, in percent (4 decimals): what a user compares."""
    summary: dict[str, float] = {}
    if scores.conll_f1 is not None:
        summary["conll_f1"] = round(100 * scores.conll_f1, 4)
    for name, counts in scores.metrics.items():
        summary.update(
            {
                f"{name}_recall": round(100 * counts.recall, 4),
                f"{name}_precision": round(100 * counts.precision, 4),
                f"{name}_f1": round(100 * counts.f1, 4),
            }
        )
    return summary
