"""Typed configuration: one frozen dataclass per model and one for training, unknown keys rejected.

Keys are named as in the original ``experiments.conf`` of the BERT coreference code.
Both models are a :class:`SpanModelConfig` (the encoder, segments, span scorer and
pair scorer sizes: what the incremental model takes from its baseline) plus keys of
their own. Every configuration reads and writes itself through :class:`Config`:
values are checked against the field types, and an unknown key names the known ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from coref_pipeline.config_base import Config, ConfigError, ConfigT
from coref_pipeline.formats.conll import DEFAULT_GENRE, GENRES
from coref_pipeline.formats.segmentation import MAX_SENTENCE_SEGMENT_LEN, SegmentLength

__all__ = [
    "BaselineConfig",
    "Config",
    "ConfigError",
    "CorefTrainParameters",
    "IncrementalConfig",
    "IncrementalTrainParameters",
    "SHARED_ARCHITECTURE_KEYS",
    "SpanModelConfig",
    "TrainingConfig",
    "baseline_settings",
    "resolve_preset",
    "split_settings",
]


# "auto": bf16-mixed where the device computes bf16 natively, else 32 (devices.resolve_precision, at a run's start).
PRECISIONS = ("auto", "32", "bf16-mixed", "16-mixed")
# The spans the auxiliary mention loss (mention_loss_coef) is over: "candidates", every candidate span (a pruned
# gold mention is pushed up too; Toshniwal et al.'s); "top", the spans pruning keeps (coref-hoi's), whose
# backward pass is over those spans only (SpanScorer.top_spans).
MENTION_LOSS_SPANS = ("candidates", "top")
STRATEGIES = ("auto", "ddp")
OPTIMISERS = ("original", "torch")  # TrainingConfig.optimiser: coref_pipeline.training.optim
# mention_loss_coef "auto": this weight when the training documents annotate singletons (measured on LitBank,
# docs/benchmarks.md), else 0; decided when a run starts (resolve_mention_loss).
AUTO = "auto"
AUTO_MENTION_LOSS_COEF = 0.5
# ffnn_size and max_top_antecedents "auto": the head for what a run computes in, decided when it starts
# (resolve_head). In fp32 on a CPU the fine FFNN over the pairs sets a step's time and a time budget buys few
# steps: the smaller head takes 1.7x the steps and scored 3.98 higher in 32 minutes (LitBank, docs/benchmarks.md,
# "The head on an fp32 CPU"). In bf16 (a CPU with bf16 units) and on a GPU steps are plentiful: the full head,
# the recipe measured there.
FP32_CPU_HEAD = {"ffnn_size": 500, "max_top_antecedents": 25}
FULL_HEAD = {"ffnn_size": 1000, "max_top_antecedents": 50}


def _require_count_or_auto(config: Config, key: str) -> None:
    value = getattr(config, key)
    config.require(value == AUTO or (isinstance(value, int) and value >= 1), key, "at least 1, or auto")


def _check_span_selection(config: BaselineConfig | IncrementalConfig) -> None:
    """The checks of the keys each model has its own value of."""
    # above 1 keeps every candidate of short segments (Xia et al.'s code allows it; k is capped by the candidates)
    config.require(config.top_span_ratio > 0, "top_span_ratio", "greater than 0")
    config.require_range("dropout_rate", 0.0, 1.0, high_open=True)
    coef = config.mention_loss_coef
    config.require(coef == AUTO or (isinstance(coef, float) and coef >= 0), "mention_loss_coef", "0 or more, or auto")
    config.require(
        config.mention_loss_spans in MENTION_LOSS_SPANS, "mention_loss_spans", f"one of {list(MENTION_LOSS_SPANS)}"
    )


@dataclass(frozen=True)
class SpanModelConfig(Config):
    """What both models share, and what fixes the shapes of the weights the incremental model takes."""

    encoder: str = "embedded:minilm"
    tokenizer: str | None = None  # None: the encoder's own (SpanBERT uses bert-base-cased's)
    max_segment_len: int = 384  # subtokens per segment (and the encoder input's width)
    # Segments of at most this many whole sentences (Xia et al.'s sentence-level segments; the
    # partition "{N}sent"), within max_segment_len subtokens; None: filled up to max_segment_len.
    segment_sentences: int | None = None
    max_training_sentences: int = 3  # segments per training crop; rows of the segment-distance embedding
    max_span_width: int = 30
    word_boundary_spans: bool = False
    # The candidate rule: false, no candidate span covers [CLS] or [SEP] (this project's); true, the original's
    # (independent.py): spans over them wherever the sentence map allows. import-tf-checkpoint writes true.
    special_token_spans: bool = False
    # Whether a span may take an antecedent that overlaps it (holds it or is nested in it): true, the original's;
    # false, never: such a link is almost never gold (LitBank's training clusters hold 176 such pairs of 519,475),
    # and a wrong one chains strangers through a span that holds both ("the pilot landed the plane"). The
    # incremental model takes its baseline's: a span joins no entity with a mention overlapping it.
    overlapping_antecedents: bool = True
    feature_size: int = 20
    model_heads: bool = True
    ffnn_size: int | str = 3000  # or "auto" (resolve_head)
    ffnn_depth: int = 1
    use_prior: bool = True
    use_metadata: bool = True
    use_features: bool = True
    use_segment_distance: bool = True
    max_num_speakers: int = 20
    genres: tuple[str, ...] = GENRES
    default_genre: str = DEFAULT_GENRE

    def __post_init__(self) -> None:
        for name in ("max_segment_len", "max_training_sentences", "max_span_width", "feature_size"):
            self.require(getattr(self, name) >= 1, name, "at least 1")
        _require_count_or_auto(self, "ffnn_size")
        self.require(self.ffnn_depth >= 1, "ffnn_depth", "at least 1")
        self.require(self.max_num_speakers >= 1, "max_num_speakers", "at least 1")
        if self.segment_sentences is not None:
            self.require(self.segment_sentences >= 1, "segment_sentences", "at least 1 or null")
            if self.max_segment_len != MAX_SENTENCE_SEGMENT_LEN:
                raise ConfigError(
                    f"segment_sentences: segments of whole sentences are up to {MAX_SENTENCE_SEGMENT_LEN} subtokens "
                    f"long; set max_segment_len: {MAX_SENTENCE_SEGMENT_LEN} with it (got {self.max_segment_len})"
                )
        self.require(self.default_genre in self.genres, "default_genre", f"one of genres {list(self.genres)}")

    @property
    def tokenizer_name(self) -> str:
        """The tokenizer the model reads its segments with."""
        return self.tokenizer or self.encoder

    @property
    def segment_length(self) -> int | str:
        """The label of the segments the model reads (``384``, ``"5sent"``): the jsonlines partition's name."""
        return SegmentLength(self.max_segment_len, self.segment_sentences).label


# How long a model's segments are: its own choice, not its baseline's (the segment-length study).
SEGMENT_LENGTH_KEYS = ("max_segment_len", "segment_sentences")
# Keys a model may set apart from the model it starts from: the segments it reads, its candidate rule (an
# imported original's is the original's; a model fine-tuned from it takes its preset's unless told) and whether
# it links overlapping spans (the incremental model takes its baseline's unless told).
OWN_CHOICE_KEYS = (*SEGMENT_LENGTH_KEYS, "special_token_spans", "overlapping_antecedents")
# Keys that fix the shapes of the weights the incremental model takes from the baseline.
SHARED_ARCHITECTURE_KEYS = tuple(key for key in SpanModelConfig.keys() if key not in OWN_CHOICE_KEYS)


@dataclass(frozen=True)
class BaselineConfig(SpanModelConfig):
    """The coarse-to-fine span-ranking model ("independent" in Joshi et al.); defaults are the original's."""

    what: ClassVar[str] = "model"

    top_span_ratio: float = 0.4
    max_num_extracted_spans: int = 3900
    max_top_antecedents: int | str = 50  # or "auto" (resolve_head)
    coarse_to_fine: bool = True
    fine_grained: bool = True
    coref_depth: int = 2
    dropout_rate: float = 0.3
    # Inference: a document with more subtokens than this is refused (use the incremental model).
    max_inference_subtokens: int = 30000
    # Weight of an auxiliary mention loss: binary cross-entropy of each span's mention score against
    # "is a gold mention" (singletons included), over every candidate (mention_loss_spans: candidates,
    # so that a pruned gold mention is pushed up too) or over the kept spans (top: coref-hoi's
    # mention_loss_coef). 0: the original loss only.
    # "auto": AUTO_MENTION_LOSS_COEF when the training documents annotate singletons, else 0 (resolve_mention_loss).
    mention_loss_coef: float | str = 0.0
    mention_loss_spans: str = "candidates"  # or "top" (MENTION_LOSS_SPANS)
    # Inference only: an antecedent whose coarse score is at most this is not scored by the fine
    # FFNN (its score is -inf), so the fine stage's cost follows the plausible pairs. None: every
    # one of the max_top_antecedents is (the original). Training always scores them all.
    min_coarse_score: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_span_selection(self)
        self.require(self.coref_depth >= 1, "coref_depth", "at least 1")
        _require_count_or_auto(self, "max_top_antecedents")
        self.require(self.max_num_extracted_spans >= 1, "max_num_extracted_spans", "at least 1")
        self.require(self.max_inference_subtokens >= 1, "max_inference_subtokens", "at least 1")


UPDATES = ("learned", "mean")
LOSSES = ("latest_antecedent", "all_antecedents")
# "paper": PAIRSCORE(m, e) + s_m(m). "calibrated": also the terms the baseline's antecedent score has,
# s_m of the entity's most recent mention and the coarse bilinear (W g_m + b) . e.
INCREMENTAL_SCORES = ("paper", "calibrated")
# "paper": the distance in subtokens from the column's mention, no speaker, segment distance 0. "baseline":
# the baseline's features with the column's mention as the antecedent (distance in kept spans, same speaker,
# segment distance).
PAIR_FEATURES = ("paper", "baseline")
# How the paper's pair features measure the distance between a span and an entity (``distance_between``): the
# subtokens between the span's start and the start of the entity's most recent mention (this project's reading of
# the paper), or the 2020 code's: between their midpoints, truncated to an integer, 0 when the span's midpoint
# comes first (torch_scores.py bucket_distance of incremental.py's float offsets).
DISTANCES = ("starts", "midpoints")
# Where eviction measures an entity's distance from (``evict_from``): the midpoint of its most recent mention, or
# the 2020 code's start of it (util.make_evict_function: ``idx - cluster.start``).
EVICTION_ANCHORS = ("midpoint", "start")
# Which earlier gold mention a training decision finds its entity through (``gold_entities``): any mention of an
# active entity, or, as the 2020 code's span-to-cluster map keeps them, a mention read in the current segment or
# the most recent mention of an entity as the last segment ended (cluster.py ClusterList.clear_cache).
GOLD_ENTITY_LOOKUPS = ("every_mention", "latest_mention")


@dataclass(frozen=True)
class IncrementalConfig(SpanModelConfig):
    """The constant-memory incremental model of Xia, Sedoc and Van Durme (2020); defaults are the paper's but ``score``.

    The :class:`SpanModelConfig` keys are the baseline's (``from_baseline``); the rest are its own.
    """

    what: ClassVar[str] = "incremental model"

    top_span_ratio: float = 0.4  # spans kept per segment, as a share of its subtokens
    threshold: float = 0.0  # score of the new-entity option
    update: str = "learned"  # "learned": e <- a e + (1 - a) m with a = sigmoid(FFNN([e; m])); "mean"
    alpha_hidden_size: int = 300
    evict_singleton_distance: int | None = 600  # subtokens; None = never evict
    evict_distance: int | None = 1200  # subtokens; None = never evict
    evict_in_training: bool = True  # false: no eviction while training (the paper found it slightly better)
    # A span that would start a new entity does not when its mention score is below this (None: always does).
    min_mention_score: float | None = None
    # The fine FFNN scores only the max_top_entities entities with the best coarse score
    # (the baseline's bilinear + the entity's mention score); None: every active entity.
    max_top_entities: int | None = None
    # Each entity is also scored through its recent_mentions most recent mentions, each as the baseline scores
    # that antecedent; the entity's score is the best of them (and of its representation). 0: the paper's.
    recent_mentions: int = 0
    entity_representation: bool = True  # false: an entity is scored by its recent mentions only
    # Inference only, with score: calibrated, as the baseline's: a column whose coarse score (s_m of the mention
    # and of the column's + the bilinear term) is at most this is not scored by the fine FFNN (-inf). None: all are.
    min_coarse_score: float | None = None
    # No effect since issue 61 (kept so that the model directories and presets that name it load): a segment's
    # spans are always scored in batched passes and decided on the host (models/incremental/: the same decisions
    # as one span at a time).
    batch_per_segment: bool = True
    finetune_encoder: bool = False
    loss: str = "latest_antecedent"  # or "all_antecedents"
    score: str = "calibrated"  # or "paper" (INCREMENTAL_SCORES; calibrated starts and ends higher: README)
    pair_features: str = "paper"  # or "baseline" (PAIR_FEATURES)
    negative_sample_rate: float = 1.0  # share of non-gold spans that enter training
    teacher_forcing_rate: float = 0.0  # share of training decisions replaced by the gold one
    # The baseline's auxiliary mention loss (BaselineConfig), over each segment's candidates or its kept spans
    # (mention_loss_spans: candidates | top); 0: the paper's loss; "auto" as for the baseline.
    mention_loss_coef: float | str = 0.0
    mention_loss_spans: str = "candidates"
    # Train on a random window of max_training_sentences segments of each document, as the baseline
    # trains; false: whole documents (the paper's).
    crop_training_documents: bool = False
    dropout_rate: float = 0.4
    # The 2020 code's behaviours a reading of the paper would not predict (docs/models/incremental.md, "Differences
    # from the authors' code"); import-icoref sets each as the code has it, the defaults are this project's.
    distance_between: str = "starts"  # DISTANCES: the paper's pair features' distance
    evict_from: str = "midpoint"  # EVICTION_ANCHORS
    gold_entities: str = "every_mention"  # GOLD_ENTITY_LOOKUPS
    crossing_spans: bool = False  # true: a segment's kept spans are its k best, crossing or not (the code's top-k)
    read_last_sentence: bool = True  # false: the spans of each segment's last sentence are never read (the code)
    # Training: clip the gradients accumulated so far after each segment's backward, over every parameter, as the
    # 2020 trainer does (trainer.py), not once per document before the step.
    clip_every_segment: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_span_selection(self)
        self.require(self.alpha_hidden_size >= 1, "alpha_hidden_size", "at least 1")
        self.require(self.update in UPDATES, "update", f"one of {list(UPDATES)}")
        self.require(self.loss in LOSSES, "loss", f"one of {list(LOSSES)}")
        self.require(self.score in INCREMENTAL_SCORES, "score", f"one of {list(INCREMENTAL_SCORES)}")
        self.require(self.pair_features in PAIR_FEATURES, "pair_features", f"one of {list(PAIR_FEATURES)}")
        self.require(self.distance_between in DISTANCES, "distance_between", f"one of {list(DISTANCES)}")
        self.require(self.evict_from in EVICTION_ANCHORS, "evict_from", f"one of {list(EVICTION_ANCHORS)}")
        self.require(self.gold_entities in GOLD_ENTITY_LOOKUPS, "gold_entities", f"one of {list(GOLD_ENTITY_LOOKUPS)}")
        for name in ("negative_sample_rate", "teacher_forcing_rate"):
            self.require_range(name, 0.0, 1.0)
        self.require(self.recent_mentions >= 0, "recent_mentions", "a number of mentions, 0 or more")
        if not self.entity_representation and self.recent_mentions < 1:
            raise ConfigError(
                f"{self.what} key 'entity_representation': false needs recent_mentions of at least 1 (nothing to score)"
            )
        self.require(
            self.max_top_entities is None or self.max_top_entities >= 1, "max_top_entities", "at least 1 or null"
        )
        if self.min_coarse_score is not None and self.score != "calibrated":
            raise ConfigError(
                f"{self.what} key 'min_coarse_score' needs score: calibrated (score: {self.score} has no coarse term)"
            )
        for name in ("evict_singleton_distance", "evict_distance"):
            value = getattr(self, name)
            self.require(value is None or value >= 0, name, "a number of subtokens, 0 or more, or null")

    @classmethod
    def from_baseline(
        cls, baseline: SpanModelConfig | Mapping[str, Any], values: Mapping[str, Any]
    ) -> IncrementalConfig:
        """The baseline's shared keys plus ``values``; a ``values`` key that contradicts the baseline is an error."""
        baseline_values = baseline.to_dict() if isinstance(baseline, Config) else dict(baseline)
        shared = {key: value for key, value in baseline_values.items() if key in SpanModelConfig.keys()}
        conflicts = {
            key: (shared[key], value)
            for key, value in values.items()
            if key in SHARED_ARCHITECTURE_KEYS
            and key in shared
            and (list(value) if isinstance(value, list | tuple) else value) != shared[key]
        }
        if conflicts:
            details = "; ".join(f"{key}: baseline {old!r}, configured {new!r}" for key, (old, new) in conflicts.items())
            raise ConfigError(f"the incremental model's configuration does not match its baseline's sizes ({details})")
        return cls.from_dict({**shared, **values})


@dataclass(frozen=True)
class TrainingConfig(Config):
    """Optimisation, evaluation and checkpoints of a run (defaults are the original baseline's)."""

    what: ClassVar[str] = "training"

    seed: int = 13
    num_epochs: int = 20
    bert_learning_rate: float = 1e-5
    task_learning_rate: float = 2e-4
    adam_eps: float = 1e-6
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    gradient_clip: float = 1.0
    # original: the original's optimization.py (TensorFlow's two Adams, its schedule, its clip; the `best` preset's
    # and so every published one's) | torch: torch's AdamW and Adam, Hugging Face's schedule (the module
    # coref_pipeline.training.optim says each one's details)
    optimiser: str = "torch"
    eval_frequency: int = 1000  # steps between dev evaluations
    report_frequency: int = 100  # steps between loss / speed reports on the progress bar
    patience: int | None = None  # evaluations without improvement before stopping; None = never
    eval_max_documents: int | None = None  # evaluate on the first N dev documents only; None = all
    max_steps: int | None = None  # stop after this many steps (one document each); None = all epochs
    # minutes of training and dev evaluation; the schedule is fitted to end with it; None = off
    time_budget_minutes: float | None = None
    checkpoint_frequency: int = 100  # steps between resumable checkpoints
    device: str = "auto"  # auto (a GPU when there is one), cpu, cuda, cuda:N or mps
    # Accelerators and scale-out (Lightning Fabric's names): see coref_pipeline.training.engine.
    # auto | 32 | bf16-mixed | 16-mixed (fp32 master weights; 16-mixed scales the loss); auto: bf16-mixed
    # where the device computes it natively (a GPU with bf16, a CPU with AMX or AVX-512 BF16), else 32
    precision: str | int = "32"
    devices: int = 1  # processes per node, one device each (GPUs, or CPU processes with device cpu)
    num_nodes: int = 1  # machines; started by torchrun or SLURM (see the README)
    strategy: str = "auto"  # auto (ddp when devices x num_nodes > 1) | ddp
    gradient_checkpointing: bool = False  # recompute the encoder's activations in backward (HF's switch)
    # score the starting weights on dev before the first step, so that they can be the best model kept
    # (fine-tuning a trained model: init_from, the incremental model); HF Trainer's eval_on_start
    eval_on_start: bool = False

    def __post_init__(self) -> None:
        for name in (
            "num_epochs",
            "eval_frequency",
            "report_frequency",
            "checkpoint_frequency",
            "devices",
            "num_nodes",
        ):
            self.require(getattr(self, name) >= 1, name, "at least 1")
        self.require_range("warmup_ratio", 0.0, 1.0, high_open=True)
        for name in ("max_steps", "patience", "eval_max_documents"):
            self.require(getattr(self, name) is None or getattr(self, name) >= 1, name, "at least 1 or null")
        for name in ("bert_learning_rate", "task_learning_rate", "adam_eps", "weight_decay", "gradient_clip"):
            self.require(getattr(self, name) >= 0, name, "0 or more")
        self.require(self.optimiser in OPTIMISERS, "optimiser", f"one of {list(OPTIMISERS)}")
        budget = self.time_budget_minutes
        self.require(budget is None or budget > 0, "time_budget_minutes", "a positive number of minutes or null")
        object.__setattr__(self, "precision", str(self.precision))  # YAML's 32 is an int
        self.require(self.precision in PRECISIONS, "precision", f"one of {list(PRECISIONS)}")
        self.require(
            self.strategy in STRATEGIES,
            "strategy",
            f"one of {list(STRATEGIES)}"
            + (
                " (fsdp is not supported: the models backpropagate outside the wrapped forward; "
                "use gradient_checkpointing and bf16-mixed, see the README's preset table)"
                if self.strategy == "fsdp"
                else ""
            ),
        )

    @property
    def world_size(self) -> int:
        """Training processes in all: ``devices x num_nodes``."""
        return self.devices * self.num_nodes


def resolve_mention_loss(config: ConfigT, annotates_singletons: bool) -> ConfigT:
    """``config`` with ``mention_loss_coef: auto`` decided for a training corpus that does or does not annotate
    singletons (:data:`AUTO_MENTION_LOSS_COEF` or 0); any other value is kept."""
    if config.mention_loss_coef != AUTO:
        return config
    return replace(config, mention_loss_coef=AUTO_MENTION_LOSS_COEF if annotates_singletons else 0.0)


def resolve_head(config: ConfigT, fp32_cpu: bool) -> ConfigT:
    """``config`` with ``ffnn_size`` and ``max_top_antecedents`` ``auto`` decided for a run that computes in fp32
    on a CPU (:data:`FP32_CPU_HEAD`) or not (:data:`FULL_HEAD`); any other value is kept."""
    head = FP32_CPU_HEAD if fp32_cpu else FULL_HEAD
    return replace(config, **{key: value for key, value in head.items() if getattr(config, key, None) == AUTO})


def require_resolved(config: BaselineConfig | IncrementalConfig) -> None:
    """A model is built from decided values: ``mention_loss_coef: auto`` must have met its training corpus,
    ``ffnn_size`` and ``max_top_antecedents`` ``auto`` the run's precision and device."""
    if config.mention_loss_coef == AUTO:
        raise ConfigError(
            "mention_loss_coef: auto is decided by the training corpus when a run starts (resolve_mention_loss); "
            "give a number to build a model outside a training run"
        )
    for key in FULL_HEAD:
        if getattr(config, key, None) == AUTO:
            raise ConfigError(
                f"{key}: auto is decided by the run's precision and device when a run starts (resolve_head); "
                "give a number to build a model outside a training run"
            )


def resolve_preset(presets: Mapping[str, Mapping[str, Any]], name: str, what: str = "preset") -> dict[str, Any]:
    """A preset's keys with those of the presets it ``extends`` under them (as HOCON's ``${base}{...}``)."""
    chain: list[str] = []
    values: dict[str, Any] = {}
    current: str | None = name
    while current is not None:
        if current not in presets:
            known = sorted(presets)
            if not chain:
                raise ConfigError(f"unknown {what} {current!r}; presets: {known}")
            raise ConfigError(f"{what} {chain[-1]!r} extends {current!r}, which is not a preset; presets: {known}")
        if current in chain:
            raise ConfigError(f"{what}s extend each other in a cycle: {' -> '.join([*chain, current])}")
        chain.append(current)
        entry = dict(presets[current] or {})
        parent = entry.pop("extends", None)
        values = {**entry, **values}
        current = parent
    return values


def split_settings(
    values: Mapping[str, Any],
    model_class: type[ConfigT],
    where: str,
    build: Callable[[dict[str, Any]], ConfigT] | None = None,
) -> tuple[ConfigT, TrainingConfig]:
    """Flat keys (as ``experiments.conf`` has them) split into a model configuration and a training one.

    ``build`` makes the model configuration from its keys (default ``model_class.from_dict``).
    """
    model_keys, training_keys = set(model_class.keys()), set(TrainingConfig.keys())
    unknown = sorted(key for key in values if key not in model_keys and key not in training_keys)
    if unknown:
        raise ConfigError(
            f"unknown {where} key(s) {unknown}; model keys: {sorted(model_keys)}; "
            f"training keys: {sorted(training_keys)}"
        )
    model = (build or model_class.from_dict)({k: v for k, v in values.items() if k in model_keys})
    training = TrainingConfig.from_dict({k: v for k, v in values.items() if k in training_keys})
    return model, training


def baseline_settings(
    presets: Mapping[str, Mapping[str, Any]], preset: str, overrides: Mapping[str, Any] | None = None
) -> tuple[BaselineConfig, TrainingConfig]:
    """The named preset (its ``extends`` chain resolved) with ``overrides`` on top, as model and training configs."""
    values = {**resolve_preset(presets, preset), **(overrides or {})}
    return split_settings(values, BaselineConfig, "coref_train")


@dataclass(frozen=True)
class CorefTrainParameters(Config):
    """The ``coref_train`` parameters: which preset, what to change in it, where the run lives."""

    what: ClassVar[str] = "coref_train"

    presets: dict[str, Any] = field(default_factory=dict)  # name -> keys (``extends`` another preset)
    preset: str = "cpu_minilm"
    overrides: dict[str, Any] = field(default_factory=dict)  # any model or training key, for one run
    work_dir: str = "data/06_models/baseline_training"  # checkpoints, best model, curves; resumed from
    restart: bool = False  # discard the run kept in work_dir
    init_from: str | None = None  # a trained baseline's model directory to fine-tune instead of a fresh one
    take_from: str | None = None  # a model directory to take as the baseline as it is, untrained (import-tf-checkpoint)
    # an encoder directory to fine-tune instead of the preset's encoder (the pretrain pipeline's out_dir), read with
    # the preset's tokenizer (the one segment used)
    encoder_from: str | None = None

    def __post_init__(self) -> None:
        if self.encoder_from is not None and (self.init_from is not None or self.take_from is not None):
            raise ConfigError(
                "coref_train: encoder_from starts from an encoder, init_from and take_from from a trained model; "
                "set one"
            )

    def settings(self) -> tuple[BaselineConfig, TrainingConfig]:
        model, training = baseline_settings(self.presets, self.preset, self.overrides)
        if self.encoder_from is not None:
            model = replace(model, encoder=self.encoder_from, tokenizer=model.tokenizer_name)
        return model, training


@dataclass(frozen=True)
class IncrementalTrainParameters(Config):
    """The ``incremental_train`` parameters: which preset, what to change in it, where the run lives."""

    what: ClassVar[str] = "incremental_train"

    # name -> IncrementalConfig and TrainingConfig keys, flat (``extends`` another preset); the sizes are the baseline's
    presets: dict[str, Any] = field(default_factory=dict)
    preset: str = "recommended"
    overrides: dict[str, Any] = field(default_factory=dict)  # any model or training key, for one run
    work_dir: str = "data/06_models/incremental_training"
    restart: bool = False
    cache_encoder_outputs: bool = True  # a frozen encoder's outputs computed once per segment and run
    encoder_cache_mb: int | None = 4096  # at most this much of them kept (the rest recomputed); null: no limit
    # An incremental model directory to continue training (e.g. one import-icoref wrote) instead of starting from the
    # baseline: its model keys are kept (``overrides`` may change them), the preset gives the training keys.
    init_from: str | None = None

    def __post_init__(self) -> None:
        cache = self.encoder_cache_mb
        self.require(cache is None or cache >= 0, "encoder_cache_mb", "a number of megabytes, 0 or more, or null")

    def values(self) -> dict[str, Any]:
        """The chosen preset's keys (its ``extends`` chain resolved) with ``overrides`` on top."""
        return {**resolve_preset(self.presets, self.preset, "incremental_train preset"), **self.overrides}
