"""Nodes of the ``coref_train`` pipeline: fine-tune the baseline, predict and score on dev."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coref_pipeline.datasets import select_partition
from coref_pipeline.encoders import resolve_encoder
from coref_pipeline.models.baseline import BaselineCorefModel
from coref_pipeline.models.config import BaselineConfig, ConfigError, TrainingConfig
from coref_pipeline.models.document import DocumentTensors
from coref_pipeline.models.encoder import SegmentEncoder
from coref_pipeline.predict import CorefModel, dev_metrics
from coref_pipeline.segmentation import load_tokenizer
from coref_pipeline.training import Optimisers, build_optimisers, fit_model, seed_everything, work_dir_from_params

logger = logging.getLogger(__name__)


def resolve_settings(params: Mapping[str, Any]) -> tuple[BaselineConfig, TrainingConfig]:
    """The named preset with ``overrides`` on top, split into model and training configs."""
    presets = params["presets"]
    if params["preset"] not in presets:
        raise ConfigError(f"unknown preset {params['preset']!r}; presets: {sorted(presets)}")
    values = {**presets[params["preset"]], **(params.get("overrides") or {})}
    model_keys = BaselineConfig.__dataclass_fields__
    training_keys = TrainingConfig.__dataclass_fields__
    unknown = sorted(key for key in values if key not in model_keys and key not in training_keys)
    if unknown:
        raise ConfigError(
            f"unknown coref_train key(s) {unknown}; model keys: {sorted(model_keys)}; "
            f"training keys: {sorted(training_keys)}"
        )
    model = BaselineConfig.from_dict({k: v for k, v in values.items() if k in model_keys})
    training = TrainingConfig.from_dict({k: v for k, v in values.items() if k in training_keys})
    return model, training


def build_baseline(config: BaselineConfig) -> tuple[BaselineCorefModel, Any]:
    """The model with pretrained encoder weights, and the encoder's tokenizer."""
    source = resolve_encoder(config.encoder)
    tokenizer = load_tokenizer(resolve_encoder(config.tokenizer) if config.tokenizer else source)
    return BaselineCorefModel(config, SegmentEncoder.from_pretrained(source)), tokenizer


def fit_baseline(
    model: BaselineCorefModel,
    tokenizer: Any,
    train_documents: list[dict[str, Any]],
    dev_documents: list[dict[str, Any]],
    training: TrainingConfig,
    work_dir: Path,
    log_params: dict[str, Any] | None = None,
    interrupt_after_step: int | None = None,
) -> CorefModel:
    """Train with resume from ``work_dir``; return the best-on-dev model.

    With ``log_params`` the curves are logged with DVCLive under ``work_dir/dvclive``.
    """
    trained = CorefModel("baseline", model, tokenizer)

    def train_step(document: DocumentTensors) -> float:
        loss = model(document).loss
        loss.backward()
        return float(loss.detach())

    def optimisers(total_steps: int) -> Optimisers:
        task_parameters = [p for module in model.task_modules() for p in module.parameters()]
        return build_optimisers(model.encoder, task_parameters, training, total_steps)

    return fit_model(
        trained,
        train_documents,
        dev_documents,
        training,
        work_dir,
        train_step,
        optimisers,
        max_segments=model.config.max_training_sentences,
        log_params=log_params,
        interrupt_after_step=interrupt_after_step,
    )


def train_baseline(segmented: Mapping[str, Any], params: dict[str, Any]) -> CorefModel:
    """Fine-tune the baseline on train, select on dev; resumes a killed run from ``work_dir``."""
    model_config, training = resolve_settings(params)
    seed_everything(training.seed)
    train_documents = select_partition(segmented, "train", params["language"], model_config.max_segment_len)
    dev_documents = select_partition(segmented, "dev", params["language"], model_config.max_segment_len)
    work_dir = work_dir_from_params(params)
    logger.info("Training %s on %d documents; dev %d", model_config.encoder, len(train_documents), len(dev_documents))
    model, tokenizer = build_baseline(model_config)
    log_params = {"preset": params["preset"], **model_config.to_dict(), **training.to_dict()}
    return fit_baseline(model, tokenizer, train_documents, dev_documents, training, work_dir, log_params)


def predict_dev(model: CorefModel, segmented: Mapping[str, Any], params: dict[str, Any]) -> list:
    """Dev predictions of the trained model."""
    documents = select_partition(segmented, "dev", params["language"], model.config.max_segment_len)
    return model.predict_documents(documents, total=len(documents))


def score_dev(predictions: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, float]:
    """CoNLL-2012 metrics (percent) of dev predictions, for ``dvc metrics``."""
    _, training = resolve_settings(params)
    return dev_metrics(predictions, training.remove_singletons)
