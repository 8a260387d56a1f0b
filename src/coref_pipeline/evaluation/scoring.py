"""Corpus scoring: key and response documents -> pooled coreference scores.

Documents are matched by ``doc_key``. Each side's clusters are cleaned first:
a mention (span) listed more than once keeps its first occurrence and the rest
are dropped with a warning; clusters left empty are dropped. The reference
scorer v8.01 drops repeated response mentions the same way but refuses to score
a response with more than 10 of them; we say what is wrong and score the rest.
Corpus scores pool counts over documents as the reference does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

from coref_pipeline.conll import read_conll
from coref_pipeline.evaluation.metrics import (
    CONLL_METRICS,
    METRIC_NAMES,
    METRICS,
    Cluster,
    Counts,
    MetricCounts,
    Span,
    cluster_overlap,
    mention_identification,
)

logger = logging.getLogger(__name__)

DEFAULT_METRICS: tuple[str, ...] = CONLL_METRICS
REFERENCE_REPEATED_MENTION_LIMIT = 10

ClustersByDoc = Mapping[str, Sequence[Sequence[Span]]]


def conll_f1(metrics: Mapping[str, MetricCounts]) -> float | None:
    """Mean of the MUC, B³ and CEAF-e F1; ``None`` unless all three were computed."""
    if not all(name in metrics for name in CONLL_METRICS):
        return None
    return sum(metrics[name].f1 for name in CONLL_METRICS) / len(CONLL_METRICS)


@dataclass(frozen=True)
class DocumentScores:
    """One document's counts per metric and its mention identification counts."""

    doc_key: str
    metrics: dict[str, MetricCounts]
    mentions: Counts

    def __getitem__(self, metric: str) -> MetricCounts:
        return self.metrics[metric]

    @property
    def conll_f1(self) -> float | None:
        return conll_f1(self.metrics)

    def to_dict(self) -> dict[str, object]:
        return {
            "metrics": {name: counts.to_dict() for name, counts in self.metrics.items()},
            "mentions": self.mentions.to_dict(),
            "conll_f1": self.conll_f1,
        }


@dataclass(frozen=True)
class CorpusScores:
    """Counts pooled over documents (summed, then R/P/F1), with the per-document scores."""

    metrics: dict[str, MetricCounts]
    mentions: Counts
    documents: list[DocumentScores] = field(default_factory=list)

    def __getitem__(self, metric: str) -> MetricCounts:
        return self.metrics[metric]

    @property
    def conll_f1(self) -> float | None:
        return conll_f1(self.metrics)

    def document(self, doc_key: str) -> DocumentScores:
        for document in self.documents:
            if document.doc_key == doc_key:
                return document
        raise KeyError(doc_key)

    def to_dict(self, per_document: bool = False) -> dict[str, object]:
        result: dict[str, object] = {
            "metrics": {name: counts.to_dict() for name, counts in self.metrics.items()},
            "mentions": self.mentions.to_dict(),
            "conll_f1": self.conll_f1,
            "num_documents": len(self.documents),
        }
        if per_document:
            result["documents"] = {document.doc_key: document.to_dict() for document in self.documents}
        return result


def pool(documents: Sequence[DocumentScores], metrics: Sequence[str] | None = None) -> CorpusScores:
    """Pool documents' counts (sum numerators and denominators per metric)."""
    if metrics is None:
        metrics = list(documents[0].metrics) if documents else []
    pooled: dict[str, MetricCounts] = {}
    for name in metrics:
        counts = [document.metrics[name] for document in documents]
        pooled[name] = sum(counts[1:], counts[0]) if counts else _empty_counts(name)
    mentions = sum((document.mentions for document in documents), Counts(0, 0, 0, 0))
    return CorpusScores(pooled, mentions, list(documents))


def _empty_counts(metric: str) -> MetricCounts:
    return METRICS[metric](cluster_overlap([], []))


def check_metrics(metrics: Iterable[str]) -> tuple[str, ...]:
    """Validate metric names (order kept, repeats dropped)."""
    names = tuple(dict.fromkeys(metrics))
    unknown = [name for name in names if name not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {', '.join(unknown)}; choose from {', '.join(METRIC_NAMES)}")
    return names


def deduplicate_mentions(clusters: Sequence[Sequence[Span]], doc_key: str, side: str = "response") -> list[Cluster]:
    """Keep each span's first occurrence (in cluster order), drop repeats and empty clusters.

    Each dropped repeat is logged as a warning naming the document and the span.
    Spans given as lists (e.g. from JSON) become ``(int, int)`` tuples.
    """
    try:  # fast path: hashable spans, no repeats, no empty cluster
        mentions = set(chain.from_iterable(clusters))
        if len(mentions) == sum(map(len, clusters)) and all(clusters):
            return [list(cluster) for cluster in clusters]
    except TypeError:  # spans given as lists
        pass
    cluster_of: dict[Span, int] = {}
    cleaned: list[Cluster] = []
    for cluster_index, cluster in enumerate(clusters):
        kept: list[Span] = []
        for raw_span in cluster:
            span = (int(raw_span[0]), int(raw_span[1]))
            first = cluster_of.get(span)
            if first is not None:
                logger.warning(
                    "Document %r (%s): dropping repeated mention %s, already in %s cluster (first occurrence kept)",
                    doc_key,
                    side,
                    span,
                    "the same" if first == cluster_index else "an earlier",
                )
                continue
            cluster_of[span] = cluster_index
            kept.append(span)
        if kept:
            cleaned.append(kept)
    return cleaned


def remove_singleton_clusters(clusters: Sequence[Cluster]) -> list[Cluster]:
    """Drop clusters of one mention."""
    return [cluster for cluster in clusters if len(cluster) > 1]


def read_clusters(path: str | Path) -> dict[str, list[Cluster]]:
    """Word-level clusters of every document of a CoNLL-2012 file, by ``doc_key``, in reference order.

    Raises ``FileNotFoundError``, ``coref_pipeline.conll.ConllFormatError``, or
    ``ValueError`` if a ``doc_key`` appears twice.
    """
    documents = read_conll(
        path,
        min_columns=1,
        strict_mentions=False,
        bracket_order="reference",
        allow_cross_sentence=True,
        coref_only=True,
    )
    clusters_by_doc: dict[str, list[Cluster]] = {}
    for document in documents:
        if document.doc_key in clusters_by_doc:
            raise ValueError(f"{path}: document {document.doc_key!r} appears more than once")
        # read_conll lists clusters as the reference scorer numbers them (first bracket first),
        # which decides which copy of a repeated mention is kept.
        clusters_by_doc[document.doc_key] = [cluster for cluster in document.clusters if cluster]
    return clusters_by_doc


def _check_same_documents(key: ClustersByDoc, response: ClustersByDoc, key_source: str, response_source: str) -> None:
    for missing, present_in, absent_from in (
        ([doc for doc in key if doc not in response], key_source, response_source),
        ([doc for doc in response if doc not in key], response_source, key_source),
    ):
        if missing:
            shown = ", ".join(repr(doc) for doc in missing[:5]) + (
                f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            )
            raise ValueError(f"{len(missing)} document(s) of {present_in} missing from {absent_from}: {shown}")


def score_document(
    doc_key: str,
    key_clusters: Sequence[Sequence[Span]],
    response_clusters: Sequence[Sequence[Span]],
    metrics: Sequence[str] = DEFAULT_METRICS,
    remove_singletons: bool = False,
) -> tuple[DocumentScores, int]:
    """Score one document; also returns how many repeated response mentions were dropped."""
    key = deduplicate_mentions(key_clusters, doc_key, "key")
    response = deduplicate_mentions(response_clusters, doc_key, "response")
    dropped = sum(map(len, response_clusters)) - sum(map(len, response))
    if remove_singletons:
        key, response = remove_singleton_clusters(key), remove_singleton_clusters(response)
    overlap = cluster_overlap(key, response)
    counts = {name: METRICS[name](overlap) for name in metrics}
    return DocumentScores(doc_key, counts, mention_identification(overlap)), dropped


def score_documents(
    key_clusters_by_doc: ClustersByDoc,
    response_clusters_by_doc: ClustersByDoc,
    metrics: Iterable[str] = DEFAULT_METRICS,
    remove_singletons: bool = False,
    key_source: str = "the key",
    response_source: str = "the response",
) -> CorpusScores:
    """Score every key document against the response document with the same ``doc_key``.

    A document present on one side only raises ``ValueError`` naming it.
    ``remove_singletons`` drops one-mention clusters (after removing repeats).
    """
    names = check_metrics(metrics)
    _check_same_documents(key_clusters_by_doc, response_clusters_by_doc, key_source, response_source)
    documents = []
    total_dropped = 0
    for doc_key, key_clusters in key_clusters_by_doc.items():
        document, dropped = score_document(
            doc_key, key_clusters, response_clusters_by_doc[doc_key], names, remove_singletons
        )
        documents.append(document)
        total_dropped += dropped
    if total_dropped > REFERENCE_REPEATED_MENTION_LIMIT:
        logger.warning(
            "%s repeats %d mentions (dropped above); the reference scorer v8.01 refuses to score a response "
            "with more than %d repeated mentions: fix the system output",
            response_source,
            total_dropped,
            REFERENCE_REPEATED_MENTION_LIMIT,
        )
    return pool(documents, names)


def score_files(
    key_path: str | Path,
    response_path: str | Path,
    metrics: Iterable[str] = DEFAULT_METRICS,
    remove_singletons: bool = False,
) -> CorpusScores:
    """Score a response CoNLL-2012 file against a key file."""
    names = check_metrics(metrics)
    key = read_clusters(key_path)
    response = read_clusters(response_path)
    return score_documents(key, response, names, remove_singletons, str(key_path), str(response_path))
