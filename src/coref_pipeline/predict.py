"""Trained models in use: load a model directory, predict clusters on jsonlines documents."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from coref_pipeline.models.baseline import BaselineCorefModel, predicted_clusters
from coref_pipeline.models.config import BaselineConfig, IncrementalConfig
from coref_pipeline.models.document import DocumentTensors, tensorize
from coref_pipeline.models.encoder import SegmentEncoder
from coref_pipeline.models.incremental import IncrementalCorefModel
from coref_pipeline.models.serialization import load_model_directory, save_model_directory

logger = logging.getLogger(__name__)


class DocumentTooLongError(ValueError):
    """A document longer than the baseline's ``max_inference_subtokens``."""


MODEL_TYPES = {
    "baseline": (BaselineConfig, BaselineCorefModel),
    "incremental": (IncrementalConfig, IncrementalCorefModel),
}


@dataclass
class TrainedModel:
    """A model with its tokenizer and configuration, as stored in a model directory."""

    model_type: str  # "baseline" or "incremental"
    model: BaselineCorefModel | IncrementalCorefModel
    tokenizer: Any

    @property
    def config(self) -> BaselineConfig | IncrementalConfig:
        return self.model.config

    def save(self, directory: str | Path) -> None:
        save_model_directory(directory, self.model, self.model_type, self.config.to_dict(), self.tokenizer)

    @classmethod
    def load(cls, directory: str | Path) -> TrainedModel:
        """Load a model directory written by ``save`` (safetensors and JSON only, no network).

        The directory says which model it holds (``coref_config.json``).
        """
        model_type, model_config, encoder_config, state_dict, tokenizer = load_model_directory(directory)
        if model_type not in MODEL_TYPES:
            raise ValueError(f"{directory} holds a {model_type!r} model; known models: {sorted(MODEL_TYPES)}")
        config_class, model_class = MODEL_TYPES[model_type]
        config = config_class.from_dict(model_config)
        model = model_class(config, SegmentEncoder.from_config(encoder_config))
        model.load_state_dict(state_dict)
        model.eval()
        return cls(model_type, model, tokenizer)

    def tensorize(self, document: dict[str, Any]) -> DocumentTensors:
        config = self.config
        return tensorize(
            document,
            self.tokenizer,
            config.max_segment_len,
            config.genres,
            config.default_genre,
            config.max_num_speakers,
        )

    def predict_tensors(self, tensors: DocumentTensors) -> list[list[tuple[int, int]]]:
        """Predicted subtoken clusters of one document."""
        if self.model_type == "incremental":
            return self._forward_for_inference(tensors).clusters
        if tensors.num_tokens > self.config.max_inference_subtokens:
            raise DocumentTooLongError(
                f"document {tensors.doc_key!r} has {tensors.num_tokens} subtokens, more than the baseline's "
                f"max_inference_subtokens={self.config.max_inference_subtokens}; use the incremental model, "
                f"whose memory does not grow with length"
            )
        output = self._forward_for_inference(tensors)
        return predicted_clusters(
            output.top_span_starts, output.top_span_ends, output.top_antecedents, output.top_antecedent_scores
        )

    def _forward_for_inference(self, tensors: DocumentTensors) -> Any:
        """The model's output in evaluation mode without gradients; the previous mode is restored."""
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                return self.model(tensors)
        finally:
            self.model.train(was_training)

    def predict_documents(
        self, documents: Iterable[dict[str, Any]], progress: bool = True, total: int | None = None
    ) -> list[dict[str, Any]]:
        """Each jsonlines document with ``predicted_clusters`` added (subtoken spans)."""
        results = []
        for document in tqdm(documents, total=total, desc="predict", unit="doc", disable=not progress):
            clusters = self.predict_tensors(self.tensorize(document))
            results.append({**document, "predicted_clusters": [[list(span) for span in c] for c in clusters]})
        return results


def word_clusters(document: dict[str, Any], key: str = "predicted_clusters") -> list[list[tuple[int, int]]]:
    """A document's subtoken clusters mapped to word spans through ``subtoken_map``."""
    from coref_pipeline.evaluation.predictions import subtoken_to_word_clusters

    return subtoken_to_word_clusters(document[key], document["subtoken_map"])


def score_predictions(
    documents: Sequence[dict[str, Any]], remove_singletons: bool, metrics: Sequence[str] = ("muc", "bcub", "ceafe")
):
    """Score ``predicted_clusters`` against the gold ``clusters`` of jsonlines documents (word level)."""
    from coref_pipeline.evaluation.scoring import score_documents

    key = {document["doc_key"]: word_clusters(document, "clusters") for document in documents}
    response = {document["doc_key"]: word_clusters(document) for document in documents}
    return score_documents(key, response, metrics, remove_singletons=remove_singletons)


def dev_metrics(predictions: Sequence[dict[str, Any]], remove_singletons: bool) -> dict[str, float]:
    """CoNLL F1 and MUC, B3, CEAF-e recall, precision and F1 (percent, 4 decimals) of predictions."""
    scores = score_predictions(predictions, remove_singletons)
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
