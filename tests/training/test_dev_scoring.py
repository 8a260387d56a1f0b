"""Training-time dev evaluation computes exactly what ``evaluate`` computes, for both models."""

from __future__ import annotations

import pytest

from coref_pipeline.evaluation.predictions import gold_key, score_predictions, word_clusters
from coref_pipeline.evaluation.report import EvaluateSettings, evaluate_predictions
from coref_pipeline.training import Run, TrainingCallback, baseline_recipe, fit, incremental_recipe
from tests.models.tiny import conll_key
from tests.training import test_baseline, test_incremental

DOCUMENTS = test_baseline.DOCUMENTS


def annotated_with_shared_mentions() -> dict[str, list[list[tuple[int, int]]]]:
    """Each document's clusters with the biggest one split in two that share a mention.

    A corpus may annotate that; ``minimize.py`` (and so the jsonlines ``clusters``) merges
    the two, the reference scorer reads them as written.
    """
    split = {}
    for document in DOCUMENTS:
        clusters = sorted(word_clusters(document, "clusters"), key=len, reverse=True)
        biggest = clusters[0]
        assert len(biggest) >= 3
        split[document["doc_key"]] = [biggest[:2], biggest[1:], *clusters[1:]]
    return split


class RecordEvaluations(TrainingCallback):
    def __init__(self) -> None:
        self.by_step: dict[int, dict[str, float]] = {}

    def on_evaluation(self, state, metrics) -> None:
        self.by_step[state.global_step] = metrics


@pytest.mark.parametrize("model_type", ["baseline", "incremental"])
def test_training_time_dev_f1_is_what_evaluate_computes_on_the_best_models_predictions(model_type, tmp_path):
    gold = conll_key(DOCUMENTS, annotated_with_shared_mentions())
    if model_type == "baseline":
        trained, config = test_baseline.fresh_model(), test_baseline.training_config(num_epochs=6, eval_frequency=6)
        recipe = baseline_recipe(trained, config)
    else:
        trained = test_incremental.fresh_incremental(top_span_ratio=1.0)
        config = test_incremental.training_config(num_epochs=20, task_learning_rate=1e-2, eval_frequency=15)
        recipe = incremental_recipe(trained, config, "start")
    recorder = RecordEvaluations()
    run = Run(tmp_path, remove_singletons=False, callbacks=[recorder], dev_key=gold_key(gold))
    best = fit(trained, recipe, DOCUMENTS, DOCUMENTS, config, run)

    best_step = max(recorder.by_step, key=lambda step: (recorder.by_step[step]["conll_f1"], -step))
    training_metrics = recorder.by_step[best_step]
    predictions = best.predict_documents(DOCUMENTS, progress=False)
    report = evaluate_predictions(predictions, gold, EvaluateSettings(remove_singletons=False))
    assert training_metrics["conll_f1"] > 20  # the model predicts clusters: the comparison means something
    assert training_metrics["conll_f1"] == report.metrics["conll_f1"]
    shared = set(training_metrics) & set(report.scores)
    assert shared >= {"muc_f1", "bcub_f1", "ceafe_f1", "muc_recall", "bcub_precision"}
    assert {key: training_metrics[key] for key in shared} == {key: report.scores[key] for key in shared}
    # The jsonlines clusters (merged) would have given another figure for the same predictions.
    merged = round(100 * score_predictions(predictions, remove_singletons=False).conll_f1, 4)
    assert merged != report.metrics["conll_f1"]


def test_a_dev_document_missing_from_the_gold_file_is_named(tmp_path):
    gold = gold_key(conll_key(DOCUMENTS[:2]))
    with pytest.raises(ValueError, match="dev.gold_conll has no document 'nw/d2_0'"):
        gold.restricted_to(document["doc_key"] for document in DOCUMENTS)
