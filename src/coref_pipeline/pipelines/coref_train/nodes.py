"""Nodes of the ``coref_train`` pipeline: fine-tune the baseline, predict and score on dev."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from coref_pipeline.datasets import select_partition
from coref_pipeline.encoders import resolve_encoder
from coref_pipeline.models.baseline import BaselineCorefModel
from coref_pipeline.models.config import BaselineConfig, ConfigError, TrainingConfig
from coref_pipeline.models.encoder import SegmentEncoder
from coref_pipeline.predict import TrainedModel, score_predictions
from coref_pipeline.segmentation import load_tokenizer
from coref_pipeline.training import TrainingHooks, build_optimisers, seed_everything, train_loop

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
) -> TrainedModel:
    """Train with resume from ``work_dir``; return the best-on-dev model.

    With ``log_params`` the curves are logged with DVCLive under ``work_dir/dvclive``.
    """
    trained = TrainedModel("baseline", model, tokenizer)
    config = model.config
    prepare_work_dir(work_dir, run_fingerprint(config.to_dict(), training.to_dict(), train_documents, dev_documents))
    train_tensors = [trained.tensorize(document) for document in train_documents]
    dev_subset = dev_documents[: training.eval_max_documents] if training.eval_max_documents else dev_documents
    dev_tensors = [trained.tensorize(document) for document in dev_subset]
    total_steps = training.max_steps or training.num_epochs * len(train_tensors)
    task_parameters = [p for module in model.task_modules() for p in module.parameters()]
    optimisers = build_optimisers(model.encoder, task_parameters, training, total_steps)
    best_dir = work_dir / "best"

    def evaluate() -> dict[str, float]:
        predictions = [
            {**document, "predicted_clusters": trained.predict_tensors(tensors)}
            for document, tensors in zip(dev_subset, dev_tensors, strict=True)
        ]
        scores = score_predictions(predictions, training.remove_singletons)
        return {"conll_f1": 100 * scores.conll_f1, **{f"{m}_f1": 100 * scores[m].f1 for m in ("muc", "bcub", "ceafe")}}

    def loss(document) -> Any:
        return model(document).loss

    hooks = TrainingHooks(evaluate=evaluate, save_best=lambda: trained.save(best_dir), loss=loss)
    with _dvclive(work_dir, log_params) as live:
        state = train_loop(
            model,
            train_tensors,
            optimisers,
            hooks,
            training,
            work_dir,
            config.max_training_sentences,
            live=live,
            interrupt_after_step=interrupt_after_step,
        )
    logger.info("Best dev CoNLL F1 %.2f at step %d of %d", state.best_f1, state.best_step, state.global_step)
    return TrainedModel.load(best_dir)


@contextmanager
def _dvclive(work_dir: Path, log_params: dict[str, Any] | None) -> Iterator[Any]:
    """A DVCLive logger in ``work_dir/dvclive`` (resumed with the run), or None without ``log_params``."""
    if log_params is None:
        yield None
        return
    from dvclive import Live

    with Live(dir=str(work_dir / "dvclive"), dvcyaml=False, save_dvc_exp=False, resume=True) as live:
        live.log_params(log_params)
        yield live


def run_fingerprint(model: dict[str, Any], training: dict[str, Any], *document_lists: list[dict[str, Any]]) -> str:
    """A hash of everything a run depends on: both configurations and the documents."""
    digest = hashlib.sha256(json.dumps([model, training], sort_keys=True).encode())
    for documents in document_lists:
        for document in documents:
            digest.update(json.dumps(document, sort_keys=True).encode())
    return digest.hexdigest()


def prepare_work_dir(work_dir: Path, fingerprint: str) -> None:
    """Keep the work directory for a resume only if it belongs to the same run; else start afresh."""
    marker = work_dir / "run_fingerprint.txt"
    if work_dir.exists() and (not marker.is_file() or marker.read_text().strip() != fingerprint):
        logger.warning("%s holds a run with another configuration or data: starting a fresh run", work_dir)
        shutil.rmtree(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    marker.write_text(fingerprint + "\n")


def train_baseline(segmented: Mapping[str, Any], params: dict[str, Any]) -> TrainedModel:
    """Fine-tune the baseline on train, select on dev; resumes a killed run from ``work_dir``."""
    model_config, training = resolve_settings(params)
    seed_everything(training.seed)
    train_documents = select_partition(segmented, "train", params["language"], model_config.max_segment_len)
    dev_documents = select_partition(segmented, "dev", params["language"], model_config.max_segment_len)
    work_dir = Path(params["work_dir"])
    if params.get("restart") and work_dir.exists():
        shutil.rmtree(work_dir)
    logger.info("Training %s on %d documents; dev %d", model_config.encoder, len(train_documents), len(dev_documents))
    model, tokenizer = build_baseline(model_config)
    log_params = {"preset": params["preset"], **model_config.to_dict(), **training.to_dict()}
    return fit_baseline(model, tokenizer, train_documents, dev_documents, training, work_dir, log_params)


def predict_dev(model: TrainedModel, segmented: Mapping[str, Any], params: dict[str, Any]) -> list:
    """Dev predictions of the trained model."""
    documents = select_partition(segmented, "dev", params["language"], model.config.max_segment_len)
    return model.predict_documents(documents, total=len(documents))


def score_dev(predictions: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, float]:
    """CoNLL-2012 metrics (percent) of dev predictions, for ``dvc metrics``."""
    _, training = resolve_settings(params)
    scores = score_predictions(predictions, training.remove_singletons)
    metrics = {"conll_f1": round(100 * scores.conll_f1, 4)}
    for name in ("muc", "bcub", "ceafe"):
        counts = scores[name]
        metrics.update(
            {
                f"{name}_recall": round(100 * counts.recall, 4),
                f"{name}_precision": round(100 * counts.precision, 4),
                f"{name}_f1": round(100 * counts.f1, 4),
            }
        )
    return metrics
