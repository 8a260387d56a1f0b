"""The baseline's recipe: a pretrained encoder under the coarse-to-fine model, fine-tuned on cropped documents."""

from __future__ import annotations

import logging
from functools import partial

from coref_pipeline.corpus import SegmentedCorpus
from coref_pipeline.devices import resolve_device
from coref_pipeline.inference import CorefModel
from coref_pipeline.models.baseline import BaselineCorefModel
from coref_pipeline.models.config import BaselineConfig, TrainingConfig
from coref_pipeline.models.encoder import SegmentEncoder
from coref_pipeline.pretrained import load_tokenizer, resolve_pretrained
from coref_pipeline.training.loop import Recipe, Run, fit_on_corpus, seed_everything
from coref_pipeline.training.optim import model_optimisers

logger = logging.getLogger(__name__)


def build_baseline(config: BaselineConfig) -> CorefModel:
    """The model with its pretrained encoder weights and the encoder's (or the configured) tokenizer."""
    encoder = SegmentEncoder.from_pretrained(resolve_pretrained(config.encoder))
    return CorefModel("baseline", BaselineCorefModel(config, encoder), load_tokenizer(config.tokenizer_name))


def baseline_recipe(trained: CorefModel, training: TrainingConfig) -> Recipe:
    """AdamW with warm-up and linear decay for the encoder, Adam with linear decay for the task;
    each training document cropped to ``max_training_sentences`` segments (the original's)."""
    model: BaselineCorefModel = trained.model
    return Recipe(
        losses=model.training_losses,
        optimisers=partial(model_optimisers, model, training),  # given the total steps; picklable
        max_segments=model.config.max_training_sentences,
    )


def train_baseline(corpus: SegmentedCorpus, config: BaselineConfig, training: TrainingConfig, run: Run) -> CorefModel:
    """Build the baseline, check the corpus was segmented for it, train on train and select on dev.

    What ``kedro run --pipelines=coref_train`` runs. A killed run resumes from
    ``run.work_dir``. Returns the best-on-dev model.
    """
    resolve_device(training.device)  # an absent device is named before the encoder is loaded
    seed_everything(training.seed)
    trained = build_baseline(config)
    return fit_on_corpus(trained, baseline_recipe(trained, training), corpus, training, run)
