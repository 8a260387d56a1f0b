"""Nodes of the ``evaluate`` pipeline: test predictions; predictions -> CoNLL response, metrics, breakdowns, plot."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from coref_pipeline.evaluation.predictions import gold_key
from coref_pipeline.evaluation.report import EvaluateSettings, evaluate_predictions
from coref_pipeline.evaluation.test_sets import (
    CORPUS_TEST,
    read_test_sets,
    set_order,
    summary_figure,
    summary_markdown,
    summary_table,
    winobias_markdown,
    winobias_summary,
)
from coref_pipeline.formats.conll import ConllFile
from coref_pipeline.formats.corpus import SegmentedCorpus
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.sharing.model_card import ModelCardSettings, model_card
from coref_pipeline.studies.cross_corpus import TestSetScores, score_named_models
from coref_pipeline.studies.cross_corpus import score_test_sets as score_on_test_sets
from coref_pipeline.studies.probes import ask_probes
from coref_pipeline.studies.segment_study import dev_f1_at_segment_lengths


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


def score_test_sets(
    model: CorefModel, test_metrics: dict[str, float], params: dict[str, Any]
) -> dict[str, TestSetScores | dict[str, float]]:
    """The model on every ``evaluate.test_sets`` set, beside its metrics on the corpus's own test (``test``)."""
    settings = EvaluateSettings.from_dict(params)
    sets = read_test_sets(settings.test_sets, settings.remove_singletons)
    return {CORPUS_TEST: test_metrics, **{scores.name: scores for scores in score_on_test_sets(model, sets, settings)}}


def score_probes(model: CorefModel, params: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The model's counts on each ``evaluate.probes`` file: probes right, pairs linked, wrong merges, non-mentions."""
    return ask_probes(model, EvaluateSettings.from_dict(params).probes)


def score_models(test: ConllFile, params: dict[str, Any]) -> dict[str, dict[str, TestSetScores]]:
    """Every ``evaluate.models`` model on the corpus's test and every named set."""
    scored = score_named_models(test, EvaluateSettings.from_dict(params))
    return {model: {scores.name: scores for scores in sets} for model, sets in scored.items()}


def summarise_test_sets(
    baseline: dict[str, dict[str, float]],
    incremental: dict[str, dict[str, float]],
    named: dict[str, dict[str, dict[str, float]]],
    params: dict[str, Any],
) -> tuple[pd.DataFrame, str, Any, pd.DataFrame]:
    """Every model on every set: the table (CSV), it and the WinoBias table as markdown, a bar chart, WinoBias (CSV)."""
    results = {"baseline": baseline, "incremental": incremental, **named}
    order = set_order(EvaluateSettings.from_dict(params).test_sets)
    table, winobias = summary_table(results, order), winobias_summary(results)
    return table, summary_markdown(table) + "\n" + winobias_markdown(winobias), summary_figure(table), winobias


def write_model_card(
    model: CorefModel,
    dev_metrics: dict[str, float],
    test_metrics: dict[str, float],
    test_sets: dict[str, dict[str, float]],
    probes: dict[str, dict[str, Any]],
    params: dict[str, Any],
    card_params: dict[str, Any],
) -> str:
    """The model's card (the Hub's README.md format) with the metrics written beside it, its answers to the pronoun
    probes and its training record."""
    return model_card(
        model.model_type,
        model.config.to_dict(),
        model.training,
        {"dev": dev_metrics, "test": test_metrics},
        {name: metrics for name, metrics in test_sets.items() if name != CORPUS_TEST},
        ModelCardSettings.from_dict(card_params),
        EvaluateSettings.from_dict(params).remove_singletons,
        probes=probes,
    )
