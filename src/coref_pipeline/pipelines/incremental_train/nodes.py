"""Nodes of the ``incremental_train`` pipeline: the incremental model from the trained baseline."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from coref_pipeline.datasets import select_partition
from coref_pipeline.models.config import ConfigError, IncrementalConfig, TrainingConfig
from coref_pipeline.models.document import DocumentTensors
from coref_pipeline.models.incremental import IncrementalCorefModel, copy_baseline_weights
from coref_pipeline.predict import CorefModel, dev_metrics
from coref_pipeline.training import (
    Optimisers,
    build_optimisers,
    fit_model,
    seed_everything,
    tensors_fingerprint,
    work_dir_from_params,
)

logger = logging.getLogger(__name__)


def resolve_incremental_settings(
    baseline: CorefModel, params: Mapping[str, Any]
) -> tuple[IncrementalConfig, TrainingConfig]:
    """The incremental model's configuration (the baseline's sizes plus ``model``) and its training's."""
    if baseline.model_type != "baseline":
        raise ConfigError(f"incremental_train starts from a baseline model, got a {baseline.model_type!r} model")
    config = IncrementalConfig.from_baseline(baseline.config.to_dict(), params.get("model") or {})
    training = TrainingConfig.from_dict(params.get("training") or {})
    return config, training


def build_incremental(baseline: CorefModel, config: IncrementalConfig) -> CorefModel:
    """The incremental model with the baseline's encoder, span scorer and pair scorer weights (by name)."""
    model = IncrementalCorefModel(config, baseline.model.encoder)
    copy_baseline_weights(model, baseline.model.state_dict())
    return CorefModel("incremental", model, baseline.tokenizer)


def fit_incremental(
    trained: CorefModel,
    train_documents: list[dict[str, Any]],
    dev_documents: list[dict[str, Any]],
    training: TrainingConfig,
    work_dir: Path,
    start_fingerprint: str,
    cache_encoder_outputs: bool = True,
    log_params: dict[str, Any] | None = None,
    interrupt_after_step: int | None = None,
) -> CorefModel:
    """Train whole documents segment by segment (one optimiser step per document); resume from ``work_dir``.

    A frozen encoder's outputs do not change, so with ``cache_encoder_outputs``
    each training document is encoded once per run (same numbers, less time).
    """
    model: IncrementalCorefModel = trained.model
    config = model.config
    cache: dict[str, list[torch.Tensor]] = {}
    use_cache = cache_encoder_outputs and not config.finetune_encoder

    def train_step(document: DocumentTensors) -> float:
        segment_hidden = None
        if use_cache:
            if document.doc_key not in cache:
                cache[document.doc_key] = [model.encode_segment(document, i) for i in range(document.num_segments)]
            segment_hidden = cache[document.doc_key].__getitem__
        return model(document, segment_hidden=segment_hidden, train=True).loss

    def optimisers(total_steps: int) -> Optimisers:
        task_parameters = [p for module in model.task_modules() for p in module.parameters()]
        encoder = model.encoder if config.finetune_encoder else None
        return build_optimisers(encoder, task_parameters, training, total_steps, task_schedule="constant")

    return fit_model(
        trained,
        train_documents,
        dev_documents,
        training,
        work_dir,
        train_step,
        optimisers,
        max_segments=None,
        log_params=log_params,
        interrupt_after_step=interrupt_after_step,
        fingerprint_extra=start_fingerprint,
    )


def train_incremental(baseline: CorefModel, segmented: Mapping[str, Any], params: dict[str, Any]) -> CorefModel:
    """Initialise from the baseline, train on train, select on dev; resumes a killed run from ``work_dir``."""
    config, training = resolve_incremental_settings(baseline, params)
    seed_everything(training.seed)
    train_documents = select_partition(segmented, "train", params["language"], config.max_segment_len)
    dev_documents = select_partition(segmented, "dev", params["language"], config.max_segment_len)
    work_dir = work_dir_from_params(params)
    trained = build_incremental(baseline, config)
    logger.info("Training the incremental model on %d documents; dev %d", len(train_documents), len(dev_documents))
    log_params = {**config.to_dict(), **training.to_dict()}
    return fit_incremental(
        trained,
        train_documents,
        dev_documents,
        training,
        work_dir,
        tensors_fingerprint(baseline.model.state_dict()),
        cache_encoder_outputs=params.get("cache_encoder_outputs", True),
        log_params=log_params,
    )


def predict_incremental_dev(model: CorefModel, segmented: Mapping[str, Any], params: dict[str, Any]) -> list:
    """Dev predictions of the trained incremental model."""
    documents = select_partition(segmented, "dev", params["language"], model.config.max_segment_len)
    return model.predict_documents(documents, total=len(documents))


def score_incremental_dev(predictions: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, float]:
    """CoNLL-2012 metrics (percent) of the dev predictions, for ``dvc metrics``."""
    training = TrainingConfig.from_dict(params.get("training") or {})
    return dev_metrics(predictions, training.remove_singletons)
