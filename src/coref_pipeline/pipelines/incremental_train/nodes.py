"""Nodes of the ``incremental_train`` pipeline: the incremental model from the trained baseline."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coref_pipeline.formats.conll import ConllFile
from coref_pipeline.formats.corpus import SegmentedCorpus
from coref_pipeline.models.config import IncrementalTrainParameters
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.training import continued_settings, incremental_settings, train_incremental

from ..dev_scores import training_run


def train(
    baseline: CorefModel,
    segmented: Mapping[str, Any],
    segmentation: dict[str, Any],
    params: dict[str, Any],
    dev_gold: ConllFile,
    remove_singletons: bool,
) -> CorefModel:
    """Initialise from the baseline, train the chosen preset (``overrides`` on top) on train, select on dev; a
    killed run resumes from ``work_dir``."""
    parameters = IncrementalTrainParameters.from_dict(params)
    if parameters.init_from is not None:  # an incremental model to continue (e.g. imported): not the baseline
        baseline = CorefModel.load(parameters.init_from)
        config, training = continued_settings(baseline, parameters.values(), parameters.overrides)
    else:
        config, training = incremental_settings(baseline, parameters.values())
    corpus = SegmentedCorpus(segmented, segmentation)
    run = training_run(parameters, "incremental", config.encoder, dev_gold, remove_singletons)
    return train_incremental(
        baseline, corpus, config, training, run, parameters.cache_encoder_outputs, parameters.encoder_cache_mb
    )
