"""Nodes of the ``coref_train`` pipeline: fine-tune the baseline (dev predictions and scores: ``dev_scores``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coref_pipeline.formats.conll import ConllFile
from coref_pipeline.formats.corpus import SegmentedCorpus
from coref_pipeline.models.config import CorefTrainParameters
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.training import train_baseline

from ..dev_scores import training_run


def train(
    segmented: Mapping[str, Any],
    segmentation: dict[str, Any],
    params: dict[str, Any],
    dev_gold: ConllFile,
    remove_singletons: bool,
) -> CorefModel:
    """Fine-tune the chosen preset (or the model in ``init_from``) on train, select on dev; a killed run
    resumes from ``work_dir``. With ``take_from`` the model in that directory is the baseline, untrained."""
    parameters = CorefTrainParameters.from_dict(params)
    model, training = parameters.settings()
    corpus = SegmentedCorpus(segmented, segmentation)
    run = training_run(parameters, "baseline", model.encoder, dev_gold, remove_singletons)
    return train_baseline(corpus, model, training, run, parameters.init_from, parameters.take_from)
