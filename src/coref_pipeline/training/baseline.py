"""The baseline's recipe: a pretrained encoder under the coarse-to-fine model, fine-tuned on cropped documents."""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial
from pathlib import Path

from coref_pipeline.formats.corpus import SegmentedCorpus
from coref_pipeline.models.baseline import BaselineCorefModel
from coref_pipeline.models.config import (
    AUTO,
    FULL_HEAD,
    SHARED_ARCHITECTURE_KEYS,
    BaselineConfig,
    ConfigError,
    TrainingConfig,
)
from coref_pipeline.models.encoder import SegmentEncoder
from coref_pipeline.pretrained import load_pretrained, load_tokenizer
from coref_pipeline.runtime.devices import resolve_device
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.training.checkpoints import has_original_optimiser, restore_original_optimiser, tensors_fingerprint
from coref_pipeline.training.loop import (
    Recipe,
    Run,
    cropping,
    decide_for_corpus,
    decide_for_run,
    fit_on_corpus,
    seed_everything,
)
from coref_pipeline.training.optim import model_optimisers

logger = logging.getLogger(__name__)


def build_baseline(config: BaselineConfig) -> CorefModel:
    """The model with its pretrained encoder weights and the encoder's (or the configured) tokenizer."""
    encoder = load_pretrained(config.encoder, "encoder", SegmentEncoder.from_pretrained)
    return CorefModel("baseline", BaselineCorefModel(config, encoder), load_tokenizer(config.tokenizer_name))


def baseline_from(directory: str | Path, config: BaselineConfig) -> CorefModel:
    """A trained baseline to fine-tune further (``init_from``): every weight and the tokenizer of the
    model in ``directory``, under ``config``, whose architecture keys must be the model's."""
    start = CorefModel.load(directory, device="cpu")
    if start.model_type != "baseline":
        raise ConfigError(f"init_from {str(directory)!r} holds a {start.model_type!r} model; it must be a baseline")
    saved = start.config.to_dict()
    config = replace(config, **{key: saved[key] for key in FULL_HEAD if getattr(config, key) == AUTO})  # its head
    wanted = config.to_dict()
    different = [key for key in SHARED_ARCHITECTURE_KEYS if saved.get(key) != wanted.get(key)]
    if different:
        pairs = ", ".join(f"{key}: {saved.get(key)!r} there, {wanted.get(key)!r} here" for key in different)
        raise ConfigError(
            f"init_from {str(directory)!r} was trained with other architecture keys ({pairs}); "
            "choose the preset it was trained with (see its coref_config.json)"
        )
    model = BaselineCorefModel(config, start.model.encoder)
    model.load_state_dict(start.model.state_dict())  # strict: every weight, nothing left out
    logger.info("Starting from the trained baseline in %s", directory)
    return CorefModel("baseline", model, start.tokenizer)


def take_baseline(directory: str | Path, corpus: SegmentedCorpus, run: Run) -> CorefModel:
    """The baseline in ``directory`` as it is, without training (``coref_train.take_from``): a released model
    imported with ``coref-pipeline import-tf-checkpoint``, or one trained elsewhere. The corpus must have been
    segmented for it (else one line says how to re-segment); the run's DVCLive folder records where it came from
    (no curves: nothing was trained)."""
    taken = CorefModel.load(directory, device="cpu")
    if taken.model_type != "baseline":
        raise ConfigError(
            f"coref_train.take_from {str(directory)!r} holds a {taken.model_type!r} model; it must be a baseline"
        )
    taken.corpus_documents(corpus, "dev")  # segmented for its tokenizer and length, or refused here
    if run.log_params is not None:
        from dvclive import Live

        live = Live(dir=str(run.work_dir / "dvclive"), dvcyaml=False, save_dvc_exp=False, resume=False)
        live.log_params({**run.log_params, "take_from": str(directory), **taken.config.to_dict()})
        live.end()
    logger.info("The baseline is the model in %s as it is (coref_train.take_from): not trained", directory)
    return taken


def baseline_recipe(
    trained: CorefModel, training: TrainingConfig, start: str = "", continue_from: str | Path | None = None
) -> Recipe:
    """The encoder's and the task's optimisers of ``training.optimiser`` (``training.optim``), each training
    document cropped to ``max_training_sentences`` segments (the original's). ``start`` identifies trained
    weights the run starts from (``init_from``); ``continue_from``, a model directory holding the original's
    optimiser state, which the run continues (``optimiser: original``)."""
    model: BaselineCorefModel = trained.model
    return Recipe(
        losses=model.training_losses,
        optimisers=partial(model_optimisers, model, training),  # given the total steps; picklable
        prepare=cropping(model.config.max_training_sentences),
        start=start,
        continue_from=None if continue_from is None else partial(restore_original_optimiser, continue_from, model),
    )


def train_baseline(
    corpus: SegmentedCorpus,
    config: BaselineConfig,
    training: TrainingConfig,
    run: Run,
    init_from: str | Path | None = None,
    take_from: str | Path | None = None,
) -> CorefModel:
    """Build the baseline (or take the trained one in ``init_from``), check the corpus was segmented
    for it, train on train and select on dev.

    What ``kedro run --pipelines=coref_train`` runs. A killed run resumes from
    ``run.work_dir``. Returns the best-on-dev model. With ``take_from`` nothing is trained: the
    model in that directory is the baseline (``take_baseline``).
    """
    if take_from is not None:
        if init_from is not None:
            raise ConfigError("coref_train: init_from fine-tunes a model and take_from takes one as it is; set one")
        with run.holding_work_dir():  # it writes the run's DVCLive record
            return take_baseline(take_from, corpus, run)
    resolve_device(training.device)  # an absent device is named before the encoder is loaded
    if init_from is None:  # another tokenizer's documents are refused before the encoder is loaded, offline
        corpus.check_before_loading(config.tokenizer_name, config.segment_length, "the model")
    config = decide_for_corpus(config, corpus)
    if init_from is None:
        config, training = decide_for_run(config, training)
    with run.holding_work_dir():  # a second run on this work directory is refused before anything loads
        seed_everything(training.seed)
        continue_from = None
        if init_from is None:
            trained, start = build_baseline(config), ""
        else:
            trained = baseline_from(init_from, config)
            start = tensors_fingerprint(trained.model.state_dict())
            if has_original_optimiser(init_from):
                if training.optimiser == "original":
                    continue_from = init_from
                else:
                    logger.info(
                        "%s holds the original's optimiser state, which optimiser: %s does not continue: "
                        "fresh optimisers (optimiser: original continues it)",
                        init_from,
                        training.optimiser,
                    )
        recipe = baseline_recipe(trained, training, start, continue_from)
        return fit_on_corpus(trained, recipe, corpus, training, run)
