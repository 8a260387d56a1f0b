"""The nodes both training pipelines end with: predict on dev, score as ``evaluate`` scores."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kedro.pipeline import Node

from coref_pipeline.evaluation.predictions import HEADLINE_METRICS, gold_key, headline_metrics, score_predictions
from coref_pipeline.formats.conll import ConllFile
from coref_pipeline.formats.corpus import SegmentedCorpus
from coref_pipeline.serving.coref_model import CorefModel

SCORING = "params:evaluate.remove_singletons"  # training scores dev as `evaluate` scores
DEV_KEY = "raw_dev"  # ... against the same key: the gold dev CoNLL file


def predict_dev(model: CorefModel, segmented: Mapping[str, Any], segmentation: dict[str, Any]) -> list:
    """A trained model's dev predictions."""
    return model.predict_corpus(SegmentedCorpus(segmented, segmentation), "dev")


def score_dev(predictions: list[dict[str, Any]], gold: ConllFile, remove_singletons: bool) -> dict[str, float]:
    """The headline figures (percent) of the dev predictions, for ``dvc metrics``, scored as ``evaluate`` scores."""
    return headline_metrics(score_predictions(predictions, remove_singletons, HEADLINE_METRICS, gold_key(gold)))


def dev_score_nodes(model: str) -> list[Node]:
    """``{model}_model`` -> ``{model}_dev_predictions`` -> ``{model}_dev_metrics``."""
    return [
        Node(
            predict_dev,
            inputs=[f"{model}_model", "segmented_documents", "segmentation"],
            outputs=f"{model}_dev_predictions",
            name=f"predict_{model}_dev",
        ),
        Node(
            score_dev,
            inputs=[f"{model}_dev_predictions", DEV_KEY, SCORING],
            outputs=f"{model}_dev_metrics",
            name=f"score_{model}_dev",
        ),
    ]
