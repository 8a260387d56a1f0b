"""A trained model scored on named test sets beside its corpus's own (``evaluate.test_sets``).

Each set is read with the model's own tokenizer at the model's own segment length (a model trained
on one corpus is scored on others as it would read them), predicted, and scored as ``evaluate``
scores the corpus's test: the same report (response, metrics, every score, breakdowns), with the
set's own singleton setting. A WinoBias part's metrics also hold the share of the key's pronouns
linked to their occupation (``evaluation.test_sets.PRONOUNS_LINKED``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coref_pipeline.evaluation.predictions import gold_key, word_clusters
from coref_pipeline.evaluation.report import EvaluateSettings, EvaluationReport, evaluate_predictions
from coref_pipeline.evaluation.test_sets import (
    CORPUS_TEST,
    PRONOUNS_LINKED,
    SET_NAME,
    TestSet,
    TestSetError,
    pronoun_links,
    read_test_sets,
)
from coref_pipeline.formats.conll import ConllFile
from coref_pipeline.formats.corpus import preprocess_corpus
from coref_pipeline.formats.segmentation import segment_words
from coref_pipeline.models.directory import CONFIG
from coref_pipeline.serving.coref_model import CorefModel

logger = logging.getLogger(__name__)

# The models the pipelines train (their own names in the summary; a named model takes another).
TRAINED_MODELS = ("baseline", "incremental")


@dataclass
class TestSetScores:
    """One model on one named set: ``evaluate``'s report, with the headline metrics a metrics file holds."""

    __test__ = False  # a test set, not a pytest test class

    name: str
    report: EvaluationReport

    @property
    def metrics(self) -> dict[str, float]:
        return self.report.metrics


def score_test_sets(model: CorefModel, test_sets: Sequence[TestSet], settings: EvaluateSettings) -> list[TestSetScores]:
    """``model`` on every set of ``test_sets`` (``evaluation.test_sets.read_test_sets``), in their order."""
    length = model.config.segment_length
    scored = []
    for test_set in test_sets:
        documents = segment_words(
            preprocess_corpus(test_set.gold), model.tokenizer, [length], False, f"segment {test_set.name}"
        )[length]
        predictions = model.predict_documents(documents, total=len(documents))
        report = evaluate_predictions(
            predictions, test_set.gold, dataclasses.replace(settings, remove_singletons=test_set.remove_singletons)
        )
        if test_set.winobias is not None:
            predicted = {document["doc_key"]: word_clusters(document) for document in predictions}
            linked, pronouns = pronoun_links(gold_key(test_set.gold).clusters, predicted)
            report.metrics[PRONOUNS_LINKED] = round(100.0 * linked / pronouns, 4) if pronouns else 0.0
            report.scores["pronouns"] = {"linked": linked, "total": pronouns}
        logger.info("%s: CoNLL F1 %.2f on %d documents", test_set.name, report.metrics["conll_f1"], len(predictions))
        scored.append(TestSetScores(test_set.name, report))
    return scored


def check_named_models(models: Mapping[str, Any]) -> dict[str, Path]:
    """``evaluate.models``: each name (as a set's, not ``baseline`` or ``incremental``) with a model directory
    (one that holds ``coref_config.json``); a bad one is a :class:`TestSetError` naming it."""
    checked = {}
    for name, directory in models.items():
        if not isinstance(name, str) or not SET_NAME.fullmatch(name) or name in TRAINED_MODELS:
            raise TestSetError(
                f"evaluate.models: {name!r} is not a model name (letters, digits, - and _; not {list(TRAINED_MODELS)})"
            )
        if not isinstance(directory, str) or not (Path(directory) / CONFIG).is_file():
            raise TestSetError(f"evaluate.models.{name}: {directory} is not a model directory (no {CONFIG})")
        checked[name] = Path(directory)
    return checked


def score_named_models(test: ConllFile, settings: EvaluateSettings) -> dict[str, list[TestSetScores]]:
    """Every model of ``settings.models`` (name -> model directory) on the corpus's ``test`` and on every
    named set, each model loaded in turn (fp32, on the CPU as ``evaluate`` loads its own)."""
    models = check_named_models(settings.models)
    sets = [
        TestSet(CORPUS_TEST, test, settings.remove_singletons),
        *read_test_sets(settings.test_sets, settings.remove_singletons),
    ]
    scored = {}
    for name, directory in models.items():
        logger.info("Model %s (%s)", name, directory)
        scored[name] = score_test_sets(CorefModel.load(directory), sets, settings)
    return scored
