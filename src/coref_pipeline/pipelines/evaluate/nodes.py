"""Nodes of the ``evaluate`` pipeline: test predictions; predictions -> CoNLL response, metrics, breakdowns, plot."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from coref_pipeline.conll import ConllFile
from coref_pipeline.corpus import SegmentedCorpus
from coref_pipeline.evaluation.predictions import gold_key
from coref_pipeline.evaluation.report import EvaluateSettings, evaluate_predictions
from coref_pipeline.inference import CorefModel
from coref_pipeline.segment_study import dev_f1_at_segment_lengths


def predict_test(model: CorefModel, segmented: Mapping[str, Any], segmentation: dict[str, Any]) -> list:
    """A trained model's test predictions (at its segment length)."""
    return model.predict_corpus(SegmentedCorpus(segmented, segmentation), "test")


def score_segment_lengths(
    model: CorefModel,
    segmented: Mapping[str, Any],
    segmentation: dict[str, Any],
    gold: ConllFile,
    params: dict[str, Any],
    dev_metrics: dict[str, float],
) -> dict[str, Any]:
    """Dev CoNLL F1 at the model's own segment length and at each of ``segment_lengths``."""
    settings = EvaluateSettings.from_dict(params)
    corpus = SegmentedCorpus(segmented, segmentation)
    return dev_f1_at_segment_lengths(
        model, corpus, gold_key(gold), settings.segment_lengths, settings.remove_singletons, dev_metrics["conll_f1"]
    )


def evaluate(
    predictions: list[dict[str, Any]], gold: ConllFile, params: dict[str, Any]
) -> tuple[str, dict[str, float], dict[str, Any], pd.DataFrame, pd.DataFrame, Any]:
    """Response CoNLL, headline metrics, every score, per-document table, breakdown, F1-by-length chart."""
    report = evaluate_predictions(predictions, gold, EvaluateSettings.from_dict(params))
    return report.response, report.metrics, report.scores, report.documents, report.breakdown, report.f1_by_length
