"""The 2-process runs of ``test_distributed``: the tiny baseline, its documents and settings, and one
rank's entry point when torchrun starts it (``python -m tests.training.distributed``)."""

from __future__ import annotations

import argparse
import math
import os
import signal
from pathlib import Path

import torch
from safetensors.torch import save_file

from coref_pipeline.models.baseline import BaselineCorefModel
from coref_pipeline.models.config import IncrementalConfig, TrainingConfig
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.training import (
    Run,
    TrainingCallback,
    baseline_recipe,
    build_incremental,
    fit,
    seed_everything,
)
from tests.models.tiny import make_document, tiny_config, tiny_encoder, tiny_hf_tokenizer
from tests.training.test_baseline import training_config as baseline_training_config

# Five documents of at most max_training_sentences segments (a crop keeps them whole): with two
# ranks an epoch is three steps, the last wrapping round to the first document.
DOCUMENTS = [make_document(f"nw/d{i}_0", seed=i, num_segments=2 + i % 2) for i in range(5)]
WORLD_SIZE = 2


def tiny_baseline(dropout: float) -> CorefModel:
    seed_everything(13)
    config = tiny_config(top_span_ratio=0.8, max_span_width=3, dropout_rate=dropout)
    model = BaselineCorefModel(config, tiny_encoder(13, hidden=64, dropout=dropout))
    return CorefModel("baseline", model, tiny_hf_tokenizer())


def tiny_incremental(finetune_encoder: bool) -> CorefModel:
    """The incremental model from the tiny baseline (every span kept in training: no sampling)."""
    baseline = tiny_baseline(dropout=0.0)
    values = {"top_span_ratio": 0.8, "dropout_rate": 0.0, "threshold": 0.0, "finetune_encoder": finetune_encoder}
    return build_incremental(baseline, IncrementalConfig.from_baseline(baseline.config, values))


def gradient_terms(trained: CorefModel) -> int:
    """How many terms one gradient element of a step sums, at most, along its longest chain: a pair score's
    input width (the pair FFNN's first layer), then the rows a weight's gradient sums, each kept span of a
    document paired with every earlier one and the dummy, over the step's documents (one a rank)."""
    longest = max(trained.tensorize(document).num_tokens for document in DOCUMENTS)
    kept = math.ceil(trained.config.top_span_ratio * longest)
    return trained.model.pair_scorer.slow_antecedent_scores.hidden[0].in_features + WORLD_SIZE * kept * (kept + 1) // 2


def training_config(**overrides) -> TrainingConfig:
    """test_baseline's training settings for a few steps on two CPU processes."""
    values = dict(
        num_epochs=2,
        max_steps=4,
        warmup_ratio=0.25,
        eval_frequency=3,
        report_frequency=1,
        checkpoint_frequency=2,
        device="cpu",
        devices=WORLD_SIZE,
    )
    return baseline_training_config(**{**values, **overrides})


class KillAfter(TrainingCallback):
    """Kills rank 0 (SIGKILL: no clean-up) right after a step and its checkpoint."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, state, loss, learning_rates) -> None:
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def train(work_dir: Path, dropout: float, stop_after: int | None = None, **overrides) -> CorefModel:
    trained = tiny_baseline(dropout)
    config = training_config(**overrides)
    callbacks = [KillAfter(stop_after)] if stop_after else []
    run = Run(work_dir, remove_singletons=False, callbacks=callbacks)
    return fit(trained, baseline_recipe(trained, config), DOCUMENTS, DOCUMENTS, config, run)


def final_weights(work_dir: Path) -> dict[str, torch.Tensor]:
    """The weights of the run's last checkpoint (written when it finished)."""
    from safetensors.torch import load_file

    from coref_pipeline.training.checkpoints import latest_checkpoint

    return load_file(latest_checkpoint(work_dir) / "model.safetensors")


def _record_writes(out: Path, rank: int) -> None:
    """Each checkpoint and model directory this process writes, one line each in ``out/writes-rank<R>.txt``."""
    from coref_pipeline.training import loop

    log = out / f"writes-rank{rank}.txt"
    log.write_text("")
    save_checkpoint, save_model, train_loop = loop.save_checkpoint, CorefModel.save, loop.train_loop

    def recorded_checkpoint(work_dir, *args, **kwargs):
        with log.open("a") as handle:
            handle.write(f"checkpoint {args[2].global_step}\n")
        return save_checkpoint(work_dir, *args, **kwargs)

    def recorded_model(self, directory, *args, **kwargs):
        with log.open("a") as handle:
            handle.write(f"model {Path(directory).name}\n")
        return save_model(self, directory, *args, **kwargs)

    def keep_final_weights(model, *args, **kwargs):
        state = train_loop(model, *args, **kwargs)
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, out / f"weights-rank{rank}.safetensors")
        return state

    loop.save_checkpoint, CorefModel.save, loop.train_loop = recorded_checkpoint, recorded_model, keep_final_weights


def _record_threads(out: Path, rank: int) -> None:
    """The threads this process computes with, one line per training step and per dev evaluation, in
    ``out/threads-rank<R>.txt``."""
    from coref_pipeline.training import loop

    log = out / f"threads-rank{rank}.txt"
    log.write_text("")
    training_step, predict_documents = loop.training_step, CorefModel.predict_documents

    def recorded_step(*args, **kwargs):
        with log.open("a") as handle:
            handle.write(f"step {torch.get_num_threads()}\n")
        return training_step(*args, **kwargs)

    def recorded_evaluation(self, *args, **kwargs):
        with log.open("a") as handle:
            handle.write(f"evaluation {torch.get_num_threads()}\n")
        return predict_documents(self, *args, **kwargs)

    loop.training_step, CorefModel.predict_documents = recorded_step, recorded_evaluation


def main() -> None:
    """One rank under torchrun: train, recording what this rank writes and its final weights."""
    parser = argparse.ArgumentParser()
    parser.add_argument("work_dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--dropout", type=float, default=0.0)
    arguments = parser.parse_args()
    rank = int(os.environ["RANK"])
    _record_writes(arguments.out, rank)
    _record_threads(arguments.out, rank)
    train(arguments.work_dir, arguments.dropout)


if __name__ == "__main__":
    main()
