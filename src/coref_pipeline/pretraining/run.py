"""SpanBERT's pretraining continued on a corpus's own text: what ``kedro run --pipelines=pretrain`` runs.

The encoder (a Hugging Face id or directory, by default the packaged MiniLM) trains with span masking and the
span boundary objective (``coref_pipeline.pretraining``) on the segments of the corpus's train split, through
the same loop as the coreference models (``train_loop``: one step function, checkpoints and resume, the time
budget, devices and precision on Lightning Fabric, DVCLive). A share of the train documents is held out; the
held-out masked-token accuracy (its masks drawn once) selects the best weights. The output is an encoder
directory that ``AutoModel.from_pretrained`` and ``coref_train`` read: the encoder and its tokenizer, and beside
them the pretraining heads (``pretraining_heads.safetensors``) and the settings (``pretraining.json``).
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import random
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from coref_pipeline.config_base import Config, ConfigError
from coref_pipeline.files import atomic_directory, atomic_write_json, atomic_write_text
from coref_pipeline.formats.corpus import SegmentedCorpus
from coref_pipeline.models.config import TrainingConfig, resolve_preset, split_settings
from coref_pipeline.models.directory import TRAINING_TIME, training_time
from coref_pipeline.models.serialization import atomic_save_tensors
from coref_pipeline.pretrained import load_pretrained, load_tokenizer
from coref_pipeline.pretraining.data import MaskBatch, batches, document_segments, held_out_documents
from coref_pipeline.pretraining.masking import MASKINGS, MaskingScheme
from coref_pipeline.pretraining.model import SpanBertPretrainer, summary
from coref_pipeline.runtime.devices import resolve_device, resolve_precision
from coref_pipeline.sharing.model_card import CARD, encoder_card
from coref_pipeline.training.checkpoints import prepare_work_dir, run_fingerprint
from coref_pipeline.training.engine import Engine
from coref_pipeline.training.loop import (
    DvcLiveCallback,
    Run,
    Selection,
    seed_everything,
    steps_at_most,
    train_loop,
)
from coref_pipeline.training.optim import StepPlan, build_optimisers

logger = logging.getLogger(__name__)

HEADS_FILE = "pretraining_heads.safetensors"
SETTINGS_FILE = "pretraining.json"
SELECTION = Selection("accuracy", "held-out masked-token accuracy")


@dataclass(frozen=True)
class PretrainConfig(Config):
    """What is pretrained and how (the training keys are ``TrainingConfig``'s)."""

    what: ClassVar[str] = "pretrain"

    encoder: str = "embedded:minilm"  # a Hugging Face id or directory; its tokenizer segments the text
    max_segment_len: int = 384  # the segments' length: the corpus segmented at it (one example a segment)
    masking: str = "span"  # span (SpanBERT's) | whole_word | subword (BERT's)
    mask_ratio: float = 0.15
    geometric_p: float = 0.2
    max_span_words: int = 10
    mask_share: float = 0.8
    random_share: float = 0.1
    sbo: bool = True  # the span boundary objective beside the masked LM
    max_span_subtokens: int = 30  # SBO's relative positions; a longer span's later subtokens: masked LM only
    batch_segments: int = 8  # segments a step
    held_out_share: float = 0.05  # of the train documents, for the held-out loss and accuracy

    def __post_init__(self) -> None:
        self.require(self.masking in MASKINGS, "masking", f"one of {list(MASKINGS)}")
        for name in ("max_segment_len", "max_span_subtokens", "batch_segments"):
            self.require(getattr(self, name) >= 1, name, "at least 1")
        self.require_range("held_out_share", 0.0, 1.0, low_open=True, high_open=True)
        self.scheme()  # its own keys checked here, named as here

    def scheme(self) -> MaskingScheme:
        return MaskingScheme(
            self.masking, self.mask_ratio, self.geometric_p, self.max_span_words, self.mask_share, self.random_share
        )


def pretrain_settings(
    presets: dict[str, dict[str, Any]], preset: str, overrides: dict[str, Any] | None = None
) -> tuple[PretrainConfig, TrainingConfig]:
    """The named ``pretrain`` preset with ``overrides``, as the pretraining and training configurations."""
    values = {**resolve_preset(presets, preset, "pretrain preset"), **(overrides or {})}
    return split_settings(values, PretrainConfig, "pretrain")


@dataclass(frozen=True)
class PretrainParameters(Config):
    """The ``pretrain`` parameters: which preset, what to change in it, where the run and its encoder go."""

    what: ClassVar[str] = "pretrain"

    presets: dict[str, Any] = field(default_factory=dict)  # name -> keys (``extends`` another preset)
    preset: str = "spanbert"
    overrides: dict[str, Any] = field(default_factory=dict)  # any pretraining or training key, for one run
    work_dir: str = "data/06_models/pretrain_training"  # checkpoints, the best encoder so far, curves
    out_dir: str = "data/06_models/pretrained_encoder"  # the encoder directory coref_train.encoder_from reads
    restart: bool = False  # discard the run kept in work_dir
    # more text to train on beside the corpus's train split: plain-text files, or folders of *.txt files
    text: tuple[str, ...] = ()

    def settings(self) -> tuple[PretrainConfig, TrainingConfig]:
        return pretrain_settings(self.presets, self.preset, self.overrides)


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Transformers' load reports silenced (a missing masked-LM head is expected and said in one line here)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def text_documents(paths: Sequence[str | Path], tokenizer_name: str, max_segment_len: int) -> list[dict[str, Any]]:
    """Plain-text files (or every ``*.txt`` under a folder) as segmented documents: split into sentences and
    words as ``predict`` splits raw text, segmented with the tokenizer at ``max_segment_len``."""
    import pandas as pd

    from coref_pipeline.formats.corpus import WORD_DOCUMENT_COLUMNS
    from coref_pipeline.formats.segmentation import segment_words
    from coref_pipeline.formats.text import split_text

    files: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found = sorted(path.rglob("*.txt"))
            if not found:  # the default folder, data/01_raw/pretrain_text, is empty until a user fills it
                logger.info("pretrain text: no .txt file in %s, nothing added from it", path)
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise ConfigError(f"pretrain key 'text': {path} is neither a file nor a folder")
    rows = []
    for path in files:
        try:
            split = split_text(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as error:
            raise ConfigError(
                f"pretrain key 'text': {path} is not UTF-8 text ({error.reason} at byte {error.start})"
            ) from None
        if not split.words:
            continue
        count = len(split.words)
        rows.append(
            {
                "doc_key": f"text/{path.as_posix()}",
                "name": path.stem,
                "part": 0,
                "genre": "text",
                "words": list(split.words),
                "sentence_ids": split.sentence_ids,
                "speakers": ["-"] * count,
                "pos": ["-"] * count,
                "clusters": [],
            }
        )
    if not rows:
        return []
    frame = pd.DataFrame(rows, columns=WORD_DOCUMENT_COLUMNS)
    return segment_words(frame, load_tokenizer(tokenizer_name), [max_segment_len], False, "segment text")[
        max_segment_len
    ]


def build_pretrainer(config: PretrainConfig) -> tuple[SpanBertPretrainer, Any]:
    """The encoder with its heads (its saved masked-LM head where it has one) and its tokenizer."""
    from transformers import AutoModel, AutoModelForMaskedLM

    with _quiet_transformers():
        encoder = load_pretrained(config.encoder, "encoder", AutoModel.from_pretrained)
        with_head, info = load_pretrained(
            config.encoder, "encoder", lambda name: AutoModelForMaskedLM.from_pretrained(name, output_loading_info=True)
        )
    model = SpanBertPretrainer(encoder, config.sbo, config.max_span_subtokens)
    missing = set(info.get("missing_keys", ()))
    saved = {name: tensor for name, tensor in with_head.state_dict().items() if name not in missing}
    if model.load_saved_head(saved):
        logger.info("Masked-LM head: the encoder's own (%s)", config.encoder)
    else:
        logger.info(
            "Masked-LM head: new (the encoder %s has none): a new transform, the decoder tied to its embeddings",
            config.encoder,
        )
    del with_head
    return model, load_tokenizer(config.encoder)


def save_encoder_directory(
    model: SpanBertPretrainer, tokenizer: Any, config: PretrainConfig, directory: Path, state: dict[str, Any]
) -> None:
    """The encoder directory, written whole or not at all: the encoder (``save_pretrained``), its tokenizer, the
    heads and the settings."""
    with atomic_directory(directory) as folder:
        model.encoder.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        heads = {name: tensor.detach().cpu().contiguous() for name, tensor in model.heads().state_dict().items()}
        atomic_save_tensors(heads, folder / HEADS_FILE)
        atomic_write_json({"pretrain": config.to_dict(), **state}, folder / SETTINGS_FILE)


@dataclass
class _PretrainJob:
    model: SpanBertPretrainer
    tokenizer: Any
    train: list
    held_out: list
    config: PretrainConfig
    training: TrainingConfig
    run: Run
    fingerprint: str


def _pretrain_on_rank(engine: Engine, job: _PretrainJob) -> dict[str, Any]:
    """One rank's part of ``pretrain_encoder``: set up, train, and the final state."""
    if engine.spawns:
        job = copy.deepcopy(job)
    model, config, training, run = job.model, job.config, job.training, job.run
    if engine.is_main:
        prepare_work_dir(run.work_dir, job.fingerprint, run.restart, training.checkpoint_frequency)
    engine.barrier()
    if training.gradient_checkpointing:
        model.encoder.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.to(engine.device)
    engine.setup(model)
    plan = StepPlan(steps_at_most(training, len(job.train), engine.world_size), training.warmup_ratio)
    optimisers = build_optimisers(model, [], training, plan)  # one AdamW (decoupled decay) over every parameter
    masking = MaskBatch(config.scheme(), job.tokenizer, config.max_span_subtokens)
    draws = random.Random(training.seed)
    held_out = [masking.masked(batch, draws) for batch in job.held_out]  # masked once: every evaluation the same

    latest: dict[str, Any] = {}

    def evaluate() -> dict[str, float]:
        with engine.autocast():
            latest["held_out"] = summary([model.losses(batch) for batch in held_out])
        return latest["held_out"]

    best_dir = run.work_dir / "best"

    def save_best() -> None:
        save_encoder_directory(model, job.tokenizer, config, best_dir, {"selected_by": SELECTION.key, **latest})

    callbacks = list(run.callbacks)
    if run.log_params is not None:
        callbacks.append(DvcLiveCallback(run.work_dir / "dvclive", run.log_params, evaluation_prefix="held_out"))
    state = train_loop(
        model,
        job.train,
        model.training_losses,
        optimisers,
        evaluate,
        save_best,
        training,
        run.work_dir,
        masking,
        callbacks,
        engine,
        plan,
        run.clock,
        SELECTION,
        model.report,
        description=run.description,
    )
    engine.barrier()
    return asdict(state)


def pretrain_encoder(
    corpus: SegmentedCorpus,
    config: PretrainConfig,
    training: TrainingConfig,
    run: Run,
    out_dir: str | Path,
    more_text: Sequence[dict[str, Any]] = (),
    corpus_name: str = "corpus",
) -> dict[str, Any]:
    """Continue ``config.encoder`` with SpanBERT's objectives on the train split of ``corpus`` (segmented with the
    encoder's tokenizer at ``max_segment_len``); the best encoder directory is copied to ``out_dir``. Returns
    its held-out metrics (losses, masked-token accuracy in percent) with the step it was kept at and the run's
    steps. ``more_text``: more segmented documents to train on (``text_documents``), never held out. The directory
    gets a card (``README.md``, ``model_card.encoder_card``) naming ``corpus_name``, and the wall time in
    ``training_time.json``."""
    device = resolve_device(training.device)
    training = replace(training, precision=resolve_precision(training.precision, device))
    corpus.check_before_loading(config.encoder, config.max_segment_len, "the encoder to pretrain")
    documents = corpus.documents("train", config.max_segment_len)
    held_out_keys = held_out_documents([d["doc_key"] for d in documents], config.held_out_share, training.seed)
    if not held_out_keys:
        raise ConfigError(
            f"pretrain: {len(documents)} train document(s): at least 2 are needed, one of them held out "
            "(held_out_share)"
        )
    with run.holding_work_dir():
        seed_everything(training.seed)
        model, tokenizer = build_pretrainer(config)
        segments = {key: [] for key in ("train", "held_out")}
        for document in documents:
            part = "held_out" if document["doc_key"] in held_out_keys else "train"
            segments[part].extend(document_segments(document, tokenizer))
        for document in more_text:
            segments["train"].extend(document_segments(document, tokenizer))
        train = batches(segments["train"], config.batch_segments, training.seed)
        held_out = batches(segments["held_out"], config.batch_segments, training.seed)
        logger.info(
            "Pretraining %s (masking %s, %s): %d train segments in %d batches, %d held-out segments (%d documents)",
            config.encoder,
            config.masking,
            "MLM + SBO" if config.sbo else "MLM only",
            len(segments["train"]),
            len(train),
            len(segments["held_out"]),
            len(held_out_keys),
        )
        fingerprint = run_fingerprint(
            config.to_dict(), training.to_dict(), documents, more_text, code="pretraining.run"
        )
        params = {**config.to_dict(), **training.to_dict(), **(run.log_params or {})}
        job = _PretrainJob(
            model, tokenizer, train, held_out, config, training, replace(run, log_params=params), fingerprint
        )
        summary_state = Engine(training).launch(_pretrain_on_rank, job)
        logger.info(
            "Best %s %.2f at step %d of %d",
            SELECTION.label,
            summary_state["best_f1"],
            summary_state["best_step"],
            summary_state["global_step"],
        )
        with atomic_directory(out_dir) as folder:
            shutil.copytree(run.work_dir / "best", folder, dirs_exist_ok=True)
            kept = json.loads((folder / SETTINGS_FILE).read_text(encoding="utf-8"))["held_out"]
            metrics = {**kept, "best_step": summary_state["best_step"], "steps": summary_state["global_step"]}
            atomic_write_text(folder / CARD, encoder_card(config.to_dict(), metrics, corpus_name))
            # the wall time apart from the card: DVC ignores this file, so the same run is the same directory
            atomic_write_json(training_time(summary_state["train_seconds"]), folder / TRAINING_TIME)
    return metrics
