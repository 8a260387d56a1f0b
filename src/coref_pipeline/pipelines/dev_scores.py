"""What both training pipelines share: their run (where it resumes, how dev is scored, what its progress bar says)
and the nodes they end with (predict on dev, score as ``evaluate`` scores)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from kedro.pipeline import Node

from coref_pipeline.evaluation.predictions import HEADLINE_METRICS, gold_key, headline_metrics, score_predictions
from coref_pipeline.formats.conll import ConllFile
from coref_pipeline.formats.corpus import SegmentedCorpus
from coref_pipeline.models.config import CorefTrainParameters, IncrementalTrainParameters
from coref_pipeline.pretrained import EMBEDDED_MINILM
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.training import Run

SCORING = "params:evaluate.remove_singletons"  # training scores dev as `evaluate` scores
DEV_KEY = "raw_dev"  # ... against the same key: the gold dev CoNLL file


def training_run(
    parameters: CorefTrainParameters | IncrementalTrainParameters,
    model: str,
    encoder: str,
    dev_gold: ConllFile,
    remove_singletons: bool,
) -> Run:
    """The run of a training node: ``parameters.work_dir`` resumed unless ``restart``, dev scored against the gold dev
    file as ``evaluate`` scores, the preset and its overrides logged, and a progress bar that says what trains on what
    (e.g. "train baseline cpu_minilm on litbank"; "... cpu_minilm with all-mpnet-base-v2 on litbank" where the encoder
    is not the packaged MiniLM)."""
    trains = f"{model} {parameters.preset}"
    if encoder != EMBEDDED_MINILM:
        trains += f" with {PurePosixPath(encoder).name}"
    return Run(
        parameters.work_dir,
        remove_singletons,
        parameters.restart,
        dev_key=gold_key(dev_gold),
        log_params={"preset": parameters.preset, "overrides": dict(parameters.overrides)},
        work_dir_parameter=f"{parameters.what}.work_dir",
        description=f"train {trains} on {PurePosixPath(dev_gold.path).parent.name}",
    )


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
