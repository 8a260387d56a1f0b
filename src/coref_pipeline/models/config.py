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


def check_shared_values(config: Any) -> None:
    """The checks both model configurations need: positive sizes, ratios in range, a known genre."""
    for name in ("max_segment_len", "max_training_sentences", "max_span_width", "ffnn_size", "feature_size"):
        if getattr(config, name) < 1:
            raise ConfigError(f"{name} must be positive, got {getattr(config, name)}")
    if config.ffnn_depth < 1:
        raise ConfigError(f"ffnn_depth must be at least 1, got {config.ffnn_depth}")
    if not 0.0 < config.top_span_ratio <= 1.0:
        raise ConfigError(f"top_span_ratio must be in (0, 1], got {config.top_span_ratio}")
    if not 0.0 <= config.dropout_rate < 1.0:
        raise ConfigError(f"dropout_rate must be in [0, 1), got {config.dropout_rate}")
    if config.default_genre not in config.genres:
        raise ConfigError(f"default_genre {config.default_genre!r} is not one of genres {list(config.genres)}")


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
        check_shared_values(self)
        if self.coref_depth < 1:
            raise ConfigError(f"coref_depth must be at least 1, got {self.coref_depth}")

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


# Keys that fix the shapes of the weights the incremental model takes from the baseline.
SHARED_ARCHITECTURE_KEYS = (
    "encoder",
    "tokenizer",
    "max_segment_len",
    "max_training_sentences",
    "max_span_width",
    "word_boundary_spans",
    "feature_size",
    "model_heads",
    "ffnn_size",
    "ffnn_depth",
    "use_prior",
    "use_metadata",
    "use_features",
    "use_segment_distance",
    "max_num_speakers",
    "genres",
    "default_genre",
)
UPDATES = ("learned", "mean")
LOSSES = ("latest_antecedent", "all_antecedents")


@dataclass(frozen=True)
class IncrementalConfig:
    """The constant-memory incremental model of Xia, Sedoc and Van Durme (2020); defaults are the paper's.

    The architecture keys (``SHARED_ARCHITECTURE_KEYS``) are the baseline's; the rest are its own.
    """

    # Shared with the baseline (the weights it takes from it).
    encoder: str = "embedded:minilm"
    tokenizer: str | None = None
    max_segment_len: int = 384
    max_training_sentences: int = 3  # rows of the segment-distance embedding (only row 0 is used)
    max_span_width: int = 30
    word_boundary_spans: bool = False
    feature_size: int = 20
    model_heads: bool = True
    ffnn_size: int = 3000
    ffnn_depth: int = 1
    use_prior: bool = True
    use_metadata: bool = True
    use_features: bool = True
    use_segment_distance: bool = True
    max_num_speakers: int = 20
    genres: tuple[str, ...] = GENRES
    default_genre: str = "nw"
    # Its own.
    top_span_ratio: float = 0.4  # spans kept per segment, as a share of its subtokens
    threshold: float = 0.0  # score of the new-entity option
    update: str = "learned"  # "learned": e <- a e + (1 - a) m with a = sigmoid(FFNN([e; m])); "mean"
    alpha_hidden_size: int = 300
    evict_singleton_distance: int | None = 600  # subtokens; None = never evict
    evict_distance: int | None = 1200  # subtokens; None = never evict
    finetune_encoder: bool = False
    loss: str = "latest_antecedent"  # or "all_antecedents"
    negative_sample_rate: float = 1.0  # share of non-gold spans that enter training
    teacher_forcing_rate: float = 0.0  # share of training decisions replaced by the gold one
    dropout_rate: float = 0.4

    def __post_init__(self) -> None:
        check_shared_values(self)
        if self.alpha_hidden_size < 1:
            raise ConfigError(f"alpha_hidden_size must be at least 1, got {self.alpha_hidden_size}")
        if self.update not in UPDATES:
            raise ConfigError(f"update must be one of {list(UPDATES)}, got {self.update!r}")
        if self.loss not in LOSSES:
            raise ConfigError(f"loss must be one of {list(LOSSES)}, got {self.loss!r}")
        for name in ("negative_sample_rate", "teacher_forcing_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        for name in ("evict_singleton_distance", "evict_distance"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ConfigError(f"{name} must be a non-negative number of subtokens or null")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> IncrementalConfig:
        return config_from_dict(cls, values, "incremental model")

    @classmethod
    def from_baseline(cls, baseline: Mapping[str, Any], values: Mapping[str, Any]) -> IncrementalConfig:
        """The baseline's architecture keys plus ``values``; a ``values`` key that contradicts the baseline is an error."""
        conflicts = {
            key: (baseline[key], value)
            for key, value in values.items()
            if key in SHARED_ARCHITECTURE_KEYS
            and key in baseline
            and (list(value) if isinstance(value, list | tuple) else value)
            != (list(baseline[key]) if isinstance(baseline[key], list | tuple) else baseline[key])
        }
        if conflicts:
            details = "; ".join(f"{key}: baseline {old!r}, configured {new!r}" for key, (old, new) in conflicts.items())
            raise ConfigError(f"the incremental model's configuration does not match its baseline's sizes ({details})")
        shared = {key: baseline[key] for key in SHARED_ARCHITECTURE_KEYS if key in baseline}
        return cls.from_dict({**shared, **values})

    def to_dict(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        values["genres"] = list(self.genres)
        return values
