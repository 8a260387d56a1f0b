"""The training loop's evaluations: ``eval_on_start`` scores the starting weights before the first step."""

from __future__ import annotations

import pytest
import torch

from coref_pipeline.training import TrainingCallback
from coref_pipeline.training.loop import cropping, train_loop
from coref_pipeline.training.optim import StepPlan, model_optimisers
from tests.training.distributed import DOCUMENTS, tiny_baseline, training_config


class Evaluations(TrainingCallback):
    def __init__(self, stop_after: int | None = None) -> None:
        self.steps: list[int] = []
        self.stop_after = stop_after

    def on_evaluation(self, state, metrics) -> None:
        self.steps.append(state.global_step)

    def on_step_end(self, state, loss, learning_rates) -> None:
        if state.global_step == self.stop_after:
            raise KeyboardInterrupt(f"interrupted after step {state.global_step}")


def train(work_dir, scores: list[float], stop_after: int | None = None, **overrides):
    """Train the tiny baseline for 6 steps; dev evaluations return ``scores`` in turn.

    Returns the state, the starting weights, the weights ``save_best`` was given each time, and the
    steps evaluated.
    """
    config = training_config(max_steps=6, eval_frequency=3, checkpoint_frequency=3, **overrides)
    trained = tiny_baseline(dropout=0.1)
    model = trained.model
    start = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    tensors = [trained.tensorize(document) for document in DOCUMENTS]
    queue, saved, evaluations = list(scores), [], Evaluations(stop_after)

    def save_best() -> None:
        saved.append({name: tensor.clone() for name, tensor in model.state_dict().items()})

    plan = StepPlan(6, config.warmup_ratio)
    optimisers = model_optimisers(model, config, plan)
    state = train_loop(
        model,
        tensors,
        model.training_losses,
        optimisers,
        lambda: {"conll_f1": queue.pop(0)},
        save_best,
        config,
        work_dir,
        cropping(3),
        [evaluations],
        None,
        plan,
    )
    return state, start, saved, evaluations.steps


def test_eval_on_start_scores_the_starting_weights_and_keeps_them_when_training_does_worse(tmp_path):
    state, start, saved, steps = train(tmp_path / "on", [50.0, 40.0, 45.0], eval_on_start=True)
    assert steps == [0, 3, 6]  # before the first step, then as usual
    assert (state.best_step, state.best_f1, state.global_step) == (0, 50.0, 6)
    assert len(saved) == 1  # the best model kept is the start: later evaluations did not beat it
    for name, tensor in start.items():
        assert torch.equal(saved[0][name], tensor), name

    state, _, saved, steps = train(tmp_path / "off", [40.0, 45.0])
    assert steps == [3, 6] and state.best_step == 6 and len(saved) == 2  # off: the trained weights only
    assert any(not torch.equal(saved[0][name], tensor) for name, tensor in start.items())


def test_eval_on_start_is_not_repeated_when_a_run_resumes(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path, [50.0, 40.0], stop_after=4, eval_on_start=True)  # checkpoint at step 3
    state, _, saved, steps = train(tmp_path, [45.0], eval_on_start=True)
    assert steps == [6] and saved == []  # resumed at step 3: the start is not scored again
    assert (state.best_step, state.best_f1) == (0, 50.0)  # the start stays the best, from the checkpoint
