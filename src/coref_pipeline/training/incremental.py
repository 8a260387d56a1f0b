"""The incremental model's recipe: the baseline's weights, then one optimiser step per (whole) document."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial
from typing import Any

import torch

from coref_pipeline.formats.corpus import SegmentedCorpus
from coref_pipeline.models.config import ConfigError, IncrementalConfig, TrainingConfig, split_settings
from coref_pipeline.models.document import DocumentTensors
from coref_pipeline.models.incremental import IncrementalCorefModel, copy_baseline_weights
from coref_pipeline.runtime.devices import resolve_device
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.training.checkpoints import tensors_fingerprint
from coref_pipeline.training.loop import Recipe, Run, cropping, decide_for_corpus, fit_on_corpus, seed_everything
from coref_pipeline.training.optim import model_optimisers

logger = logging.getLogger(__name__)


def incremental_settings(
    baseline: CorefModel, values: Mapping[str, Any] | None = None
) -> tuple[IncrementalConfig, TrainingConfig]:
    """The incremental model's configuration (the baseline's sizes plus the model keys of ``values``) and its
    training's (the training keys of ``values``): flat keys, as an ``incremental_train`` preset has them."""
    if baseline.model_type != "baseline":
        raise ConfigError(f"incremental_train starts from a baseline model, got a {baseline.model_type!r} model")
    return split_settings(
        values or {},
        IncrementalConfig,
        "incremental_train",
        lambda model_values: IncrementalConfig.from_baseline(baseline.config, model_values),
    )


def continued_settings(
    start: CorefModel, preset: Mapping[str, Any], overrides: Mapping[str, Any] | None = None
) -> tuple[IncrementalConfig, TrainingConfig]:
    """To continue training the incremental model ``start``: its own configuration with the model keys of
    ``overrides``, and the training keys of ``preset`` with those of ``overrides``."""
    if start.model_type != "incremental":
        raise ConfigError(f"incremental_train.init_from must be an incremental model, got a {start.model_type!r} model")
    values = {key: value for key, value in preset.items() if key in TrainingConfig.keys()} | dict(overrides or {})
    return split_settings(
        values,
        IncrementalConfig,
        "incremental_train",
        lambda model_values: IncrementalConfig.from_dict({**start.config.to_dict(), **model_values}),
    )


def continued_incremental(start: CorefModel, config: IncrementalConfig) -> CorefModel:
    """A copy of the incremental model ``start`` under ``config`` (its weights, all of them, loaded by name)."""
    model = IncrementalCorefModel(config, start.model.encoder)
    model.load_state_dict(start.model.state_dict())
    return CorefModel("incremental", model, start.tokenizer)


def build_incremental(baseline: CorefModel, config: IncrementalConfig) -> CorefModel:
    """The incremental model with the baseline's encoder, span scorer and pair scorer weights (by name)."""
    model = IncrementalCorefModel(config, baseline.model.encoder)
    copy_baseline_weights(model, baseline.model.state_dict())
    return CorefModel("incremental", model, baseline.tokenizer)


class EncoderCache:
    """A frozen encoder's segment outputs, computed once per segment and run (same numbers, less time).

    Each segment's output is kept under its document and its first subtoken's position in the
    whole document, so that a crop (``crop_training_documents``) finds the segments it shares
    with other crops of that document. Segments are cached in the order they are first seen
    until the cache holds ``limit_bytes`` (None: no limit); the outputs of those beyond are
    recomputed at every visit.
    """

    def __init__(self, model: IncrementalCorefModel, limit_bytes: int | None = None) -> None:
        self.model = model
        self.limit_bytes = limit_bytes
        self.outputs: dict[tuple[str, int], torch.Tensor] = {}  # (doc_key, first subtoken) -> [segment_len, H]
        self.bytes = 0
        self.window: dict[int, torch.Tensor] = {}  # the current document's last encoded window (first subtoken ->)

    def segment_output(self, document: DocumentTensors, index: int, starts: list[int]) -> torch.Tensor:
        """Segment ``index``'s output (``starts``: each segment's first subtoken in the whole document); one
        missing is encoded with the others of its window (``IncrementalCorefModel.encoder_windows``: always the
        same ones, so the same numbers as without the cache), in one pass."""
        output = self.outputs.get((document.doc_key, starts[index]))
        if output is not None:
            return output
        first, count = self.model.encoder_windows(document, index)
        outputs = self.model.encode_segments(document, first, count)  # each [segment_len, H]
        for start, encoded in zip(starts[first : first + count], outputs, strict=True):
            key = (document.doc_key, start)
            size = encoded.numel() * encoded.element_size()
            if key not in self.outputs and (self.limit_bytes is None or self.bytes + size <= self.limit_bytes):
                self.outputs[key] = encoded
                self.bytes += size
        self.window = dict(zip(starts[first : first + count], outputs, strict=True))  # the rest of the window
        return outputs[index - first]

    def losses(self, document: DocumentTensors):
        lengths = document.lengths()
        starts = [document.token_offset + sum(lengths[:index]) for index in range(len(lengths))]

        def segment_hidden(index: int) -> torch.Tensor:
            output = self.window.get(starts[index])
            return output if output is not None else self.segment_output(document, index, starts)

        self.window = {}
        return self.model.training_losses(document, segment_hidden=segment_hidden)


def incremental_recipe(
    trained: CorefModel,
    training: TrainingConfig,
    start_fingerprint: str,
    cache_encoder_outputs: bool = True,
    encoder_cache_mb: int | None = None,
) -> Recipe:
    """Whole documents read segment by segment, one optimiser step per document (the paper's; with
    ``crop_training_documents`` a random window of ``max_training_sentences`` segments, as the
    baseline trains): Adam at a constant rate for the task, and AdamW for the encoder when it is fine-tuned.
    ``start_fingerprint`` identifies the weights the run starts from; a frozen encoder's
    outputs are cached (``cache_encoder_outputs``), at most ``encoder_cache_mb`` of them."""
    model: IncrementalCorefModel = trained.model
    finetune = model.config.finetune_encoder
    if model.config.clip_every_segment and str(training.precision) == "16-mixed":
        raise ConfigError(
            "incremental_train: clip_every_segment clips between backward passes, where 16-mixed's gradients are "
            "still scaled; train it in 32 or bf16-mixed"
        )
    limit = None if encoder_cache_mb is None else encoder_cache_mb * 2**20
    losses = EncoderCache(model, limit).losses if cache_encoder_outputs and not finetune else model.training_losses
    return Recipe(
        losses=losses,
        optimisers=partial(model_optimisers, model, training, train_encoder=finetune, task_schedule="constant"),
        prepare=cropping(model.config.max_training_sentences if model.config.crop_training_documents else None),
        start=start_fingerprint,
        clip_each_loss=model.config.clip_every_segment,
    )


def train_incremental(
    baseline: CorefModel,
    corpus: SegmentedCorpus,
    config: IncrementalConfig,
    training: TrainingConfig,
    run: Run,
    cache_encoder_outputs: bool = True,
    encoder_cache_mb: int | None = None,
) -> CorefModel:
    """Initialise from the baseline (or continue ``baseline`` itself when it is an incremental model, e.g. one
    import-icoref wrote), train on train, select on dev: what ``incremental_train`` runs."""
    resolve_device(training.device)  # an absent device is named before anything is built
    config = decide_for_corpus(config, corpus)
    with run.holding_work_dir():  # a second run on this work directory is refused before anything is built
        seed_everything(training.seed)
        if baseline.model_type == "incremental":
            trained = continued_incremental(baseline, config)
        else:
            trained = build_incremental(baseline, config)
        start = tensors_fingerprint(baseline.model.state_dict())
        recipe = incremental_recipe(trained, training, start, cache_encoder_outputs, encoder_cache_mb)
        return fit_on_corpus(trained, recipe, corpus, training, run)
