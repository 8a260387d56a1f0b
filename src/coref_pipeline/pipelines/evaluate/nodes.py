"""Nodes of the ``evaluate`` pipeline: predictions -> CoNLL response, metrics, breakdowns, plot."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pandas as pd

from coref_pipeline.conll import format_conll_response, parse_conll_lines
from coref_pipeline.datasets import ConllFile, select_partition
from coref_pipeline.evaluation.breakdown import breakdown_table, document_info, document_table, f1_by_length_figure
from coref_pipeline.evaluation.scoring import score_documents
from coref_pipeline.predict import CorefModel, word_clusters

logger = logging.getLogger(__name__)


def predict_test(model: CorefModel, segmented: Mapping[str, Any], params: dict[str, Any]) -> list:
    """Test predictions of a trained model (at its segment length)."""
    documents = select_partition(segmented, "test", params["language"], model.config.max_segment_len)
    return model.predict_documents(documents, total=len(documents))


def evaluate_predictions(
    predictions: list[dict[str, Any]], gold: ConllFile, params: dict[str, Any]
) -> tuple[str, dict[str, Any], pd.DataFrame, pd.DataFrame, Any]:
    """Response CoNLL, metrics (percent, with raw counts), per-document table, breakdown and F1-by-length chart.

    Predictions are scored against the gold CoNLL file itself, as the reference scorer would.
    """
    response_clusters = {document["doc_key"]: word_clusters(document) for document in predictions}
    response_text = format_conll_response(gold.text, response_clusters, gold.path)
    gold_documents = parse_conll_lines(
        gold.text.splitlines(),
        gold.path,
        min_columns=1,
        strict_mentions=False,
        bracket_order="reference",
        allow_cross_sentence=True,
        coref_only=True,
    )
    key_clusters = {document.doc_key: document.clusters for document in gold_documents}
    scores = score_documents(
        key_clusters,
        response_clusters,
        params["metrics"],
        remove_singletons=params["remove_singletons"],
        key_source=gold.path,
        response_source="the predictions",
    )
    infos = {d["doc_key"]: document_info(d, params["default_genre"], params["genres"]) for d in predictions}
    metrics: dict[str, Any] = {"documents": len(predictions)}
    if scores.conll_f1 is not None:
        metrics["conll_f1"] = round(100 * scores.conll_f1, 4)
    for name in params["metrics"]:
        counts = scores[name]
        metrics[name] = {
            "recall": round(100 * counts.recall, 4),
            "precision": round(100 * counts.precision, 4),
            "f1": round(100 * counts.f1, 4),
        }
    metrics["counts"] = scores.to_dict()
    breakdown = breakdown_table(scores, infos)
    logger.info("CoNLL F1 %.2f on %d documents", metrics.get("conll_f1", float("nan")), len(predictions))
    return response_text, metrics, document_table(scores, infos), breakdown, f1_by_length_figure(breakdown)
