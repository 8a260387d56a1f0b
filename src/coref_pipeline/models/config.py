"""Typed configuration of the models: one dataclass per model, unknown keys rejected.

Keys are named as in the original ``experiments.conf`` of the BERT coreference code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

GENRES = ("bc", "bn", "mz", "nw", "pt", "tc", "wb")

ConfigT = TypeVar("ConfigT")


class ConfigError(ValueError):
    """A configuration with unknown or invalid keys."""


def config_from_dict(cls: type[ConfigT], values: Mapping[str, Any], what: str) -> ConfigT:
    """Build dataclass ``cls`` from ``values``; unknown keys are an error that lists the known ones."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(f"unknown {what} key(s) {unknown}; known keys: {sorted(names)}")
    kwargs = {key: tuple(value) if isinstance(value, list) else value for key, value in values.items()}
    return cls(**kwargs)


@dataclass(frozen=True)
class BaselineConfig:
    """The coarse-to-fine span-ranking model ("independent" in Joshi et al.); defaults are the original's."""

    encoder: str = "embedded:minilm"
    tokenizer: str | None = None  # None: the encoder's own (SpanBERT uses bert-base-cased's)
    max_segment_len: int = 384
    max_training_sentences: int = 3
    max_span_width: int = 30
    word_boundary_spans: bool = False
    feature_size: int = 20
    model_heads: bool = True
    ffnn_size: int = 3000
    ffnn_depth: int = 1
    use_prior: bool = True
    top_span_ratio: float = 0.4
    max_num_extracted_spans: int = 3900
    max_top_antecedents: int = 50
    coarse_to_fine: bool = True
    fine_grained: bool = True
    use_metadata: bool = True
    use_features: bool = True
    use_segment_distance: bool = True
    coref_depth: int = 2
    max_num_speakers: int = 20
    genres: tuple[str, ...] = GENRES
    default_genre: str = "nw"
    dropout_rate: float = 0.3
    # Inference: a document with more subtokens than this is refused (use the incremental model).
    max_inference_subtokens: int = 30000

    def __post_init__(self) -> None:
        for name in ("max_segment_len", "max_training_sentences", "max_span_width", "ffnn_size", "feature_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.ffnn_depth < 1:
            raise ConfigError(f"ffnn_depth must be at least 1, got {self.ffnn_depth}")
        if self.coref_depth < 1:
            raise ConfigError(f"coref_depth must be at least 1, got {self.coref_depth}")
        if not 0.0 < self.top_span_ratio <= 1.0:
            raise ConfigError(f"top_span_ratio must be in (0, 1], got {self.top_span_ratio}")
        if not 0.0 <= self.dropout_rate < 1.0:
            raise ConfigError(f"dropout_rate must be in [0, 1), got {self.dropout_rate}")
        if self.default_genre not in self.genres:
            raise ConfigError(f"default_genre {self.default_genre!r} is not one of genres {list(self.genres)}")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> BaselineConfig:
        return config_from_dict(cls, values, "model")

    def to_dict(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        values["genres"] = list(self.genres)
        return values


@dataclass(frozen=True)
class TrainingConfig:
    """Optimisation of the baseline (defaults are the original's)."""

    seed: int = 13
    num_epochs: int = 20
    bert_learning_rate: float = 1e-5
    task_learning_rate: float = 2e-4
    adam_eps: float = 1e-6
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    gradient_clip: float = 1.0
    eval_frequency: int = 1000
    report_frequency: int = 100
    patience: int | None = None  # evaluations without improvement before stopping; None = never
    eval_max_documents: int | None = None  # evaluate on the first N dev documents only; None = all
    max_steps: int | None = None  # stop after this many steps (for tests and quick runs); None = all epochs
    time_budget_minutes: float | None = None  # stop once training took this long (not reproducible); None = off
    checkpoint_frequency: int = 100  # steps between resumable checkpoints
    remove_singletons: bool = True  # score without singletons (OntoNotes has none)

    def __post_init__(self) -> None:
        if self.num_epochs < 1 or self.eval_frequency < 1 or self.checkpoint_frequency < 1:
            raise ConfigError("num_epochs, eval_frequency and checkpoint_frequency must be positive")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrainingConfig:
        return config_from_dict(cls, values, "training")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
