"""A time-budgeted run fits its schedule to the budget (a simulated clock: no wall-time assertion)."""

from __future__ import annotations

import pytest
import torch

from coref_pipeline.models.config import TrainingConfig
from coref_pipeline.training import TrainingCallback
from coref_pipeline.training.checkpoints import TrainState
from coref_pipeline.training.loop import budget_plan, cropping, train_loop
from coref_pipeline.training.optim import StepPlan, model_optimisers
from tests.training.distributed import DOCUMENTS, tiny_baseline, training_config

STEP_SECONDS, EVALUATION_SECONDS = 2.0, 10.0


class Clock:
    """Seconds that pass only as the run works: a step and an evaluation each advance it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Recorder(TrainingCallback):
    def __init__(self, stop_after: int | None = None) -> None:
        self.rates: list[float] = []
        self.evaluated_at: list[int] = []
        self.stop_after = stop_after

    def on_evaluation(self, state, metrics) -> None:
        self.evaluated_at.append(state.global_step)

    def on_step_end(self, state, loss, learning_rates) -> None:
        self.rates.append(learning_rates["bert_learning_rate"])
        if state.global_step == self.stop_after:
            raise KeyboardInterrupt(f"interrupted after step {state.global_step}")


def budgeted(**overrides) -> TrainingConfig:
    """One process, many epochs, 1.5 minutes of budget (on the simulated clock)."""
    values = dict(
        devices=1,
        max_steps=None,
        num_epochs=100,
        bert_learning_rate=1e-3,
        task_learning_rate=1e-3,
        warmup_ratio=0.2,
        eval_frequency=5,
        checkpoint_frequency=3,
        time_budget_minutes=1.5,
    )
    return training_config(**{**values, **overrides})


def run(work_dir, config: TrainingConfig, recorder: Recorder) -> tuple[TrainState, torch.nn.Module, StepPlan]:
    trained = tiny_baseline(dropout=0.1)
    model = trained.model
    clock = Clock()
    tensors = [trained.tensorize(document) for document in DOCUMENTS]

    def losses(document):
        clock.now += STEP_SECONDS
        yield from model.training_losses(document)

    def evaluate() -> dict[str, float]:
        clock.now += EVALUATION_SECONDS
        return {"conll_f1": float(len(recorder.evaluated_at))}  # each better than the last

    plan = StepPlan(config.num_epochs * len(DOCUMENTS), config.warmup_ratio)
    optimisers = model_optimisers(model, config, plan)
    state = train_loop(
        model,
        tensors,
        losses,
        optimisers,
        evaluate,
        lambda: None,
        config,
        work_dir,
        cropping(3),
        [recorder],
        None,
        plan,
        clock,
    )
    return state, model, plan


def test_the_schedule_ends_with_the_budget_at_a_last_evaluation(tmp_path):
    config = budgeted()
    recorder = Recorder()
    state, _, plan = run(tmp_path, config, recorder)
    spent = state.train_seconds + state.eval_seconds
    assert spent == STEP_SECONDS * state.global_step + EVALUATION_SECONDS * state.evaluations
    budget = 60 * config.time_budget_minutes
    # the run used its budget: within it, and one more step with its share of evaluations would not fit
    assert budget - (STEP_SECONDS + EVALUATION_SECONDS) < spent <= budget
    assert plan.total_steps == state.global_step == state.planned_steps < config.num_epochs * len(DOCUMENTS)
    assert recorder.evaluated_at[-1] == state.global_step  # the last evaluation at the end
    assert recorder.rates[-1] == 0.0  # the decay ended with the run
    warmup = int(plan.total_steps * config.warmup_ratio)
    assert max(recorder.rates) == pytest.approx(config.bert_learning_rate, rel=0.35)  # warm-up was completed
    assert all(a >= b for a, b in zip(recorder.rates[warmup:], recorder.rates[warmup + 1 :], strict=False))


def test_a_resumed_budgeted_run_keeps_its_plan(tmp_path):
    config = budgeted()
    reference_state, reference_model, _ = run(tmp_path / "reference", config, Recorder())
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "resumed", config, Recorder(stop_after=6))
    state, model, plan = run(tmp_path / "resumed", config, Recorder())
    assert (state.global_step, plan.total_steps) == (reference_state.global_step, reference_state.planned_steps)
    assert state.train_seconds == reference_state.train_seconds
    for name, tensor in reference_model.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name


def test_the_plan_counts_steps_and_evaluations_and_stays_within_bounds():
    config = budgeted(time_budget_minutes=1.0, eval_frequency=4)
    # step 10 done: 20 s of steps (2 s each) and 2 evaluations (10 s each); 20 s left of 60.
    state = TrainState(global_step=10, train_seconds=20.0, eval_seconds=20.0, evaluations=2)
    # Ending at 13: 3 steps (6 s), the evaluation at 12 and the closing one at 13 (20 s) = 26 s: too much.
    # Ending at 12: 2 steps (4 s) and the evaluation at 12 (10 s) = 14 s: fits.
    assert budget_plan(state, config, most_steps=500) == 12
    assert budget_plan(state, config, most_steps=11) == 11  # the epochs (or max_steps) bound it
    spent = TrainState(global_step=10, train_seconds=50.0, eval_seconds=20.0, evaluations=2)
    assert budget_plan(spent, config, most_steps=500) == 10  # over budget: ends now
    assert budget_plan(TrainState(), config, most_steps=500) == 500  # nothing measured yet
