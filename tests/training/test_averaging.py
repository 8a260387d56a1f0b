"""The weights' moving average (``ema_decay``): what it holds, what is evaluated and saved, resume."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from coref_pipeline.models.config import ConfigError, TrainingConfig
from coref_pipeline.training import TrainingCallback
from coref_pipeline.training.averaging import PREFIX, WeightAverage, ema_decay_at
from coref_pipeline.training.checkpoints import latest_checkpoint

from .test_baseline import InterruptAfter, fresh_model, train, training_config


class WeightRecorder(TrainingCallback):
    """The trained weights after each step, and the weights each evaluation scored."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.after_step: list[dict[str, torch.Tensor]] = []

    def on_step_end(self, state, loss, learning_rates) -> None:
        self.after_step.append({n: p.detach().clone() for n, p in self.model.named_parameters()})


def expected_average(initial: dict[str, torch.Tensor], steps: list[dict[str, torch.Tensor]], decay: float) -> dict:
    average = {name: tensor.clone() for name, tensor in initial.items()}
    for step, weights in enumerate(steps, start=1):
        d = min(decay, (1 + step) / (10 + step))
        average = {name: d * average[name] + (1 - d) * weights[name] for name in average}
    return average


def test_the_decay_warms_up_to_its_setting():
    assert ema_decay_at(0.99, 1) == pytest.approx(2 / 11)
    assert ema_decay_at(0.99, 50) == pytest.approx(51 / 60)
    assert ema_decay_at(0.99, 10_000) == 0.99
    assert ema_decay_at(0.0, 5) == 0.0


def test_the_average_is_evaluated_in_place_of_the_weights_and_the_weights_come_back():
    model = nn.Linear(3, 2)
    frozen = nn.Parameter(torch.ones(2), requires_grad=False)
    model.register_parameter("frozen", frozen)
    average = WeightAverage(model, decay=0.5)
    assert set(average.average) == {"weight", "bias"}  # a frozen weight is not averaged
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        model.weight.add_(1.0)
        model.bias.sub_(2.0)
    trained = {n: p.detach().clone() for n, p in model.named_parameters()}
    average.update(step=100)  # d = 0.5
    with average.in_place_of_weights():
        assert torch.allclose(model.weight, initial["weight"] + 0.5)
        assert torch.allclose(model.bias, initial["bias"] - 1.0)
        assert torch.equal(model.frozen, frozen)
    for name, parameter in model.named_parameters():
        assert torch.equal(parameter, trained[name]), name


def test_config_rejects_a_decay_of_one():
    with pytest.raises(ConfigError, match="ema_decay"):
        TrainingConfig(ema_decay=1.0)


def run_with_average(work_dir, decay: float | None, num_epochs: int = 2, callbacks=()):
    trained = fresh_model()
    initial = {n: p.detach().clone() for n, p in trained.model.named_parameters()}
    recorder = WeightRecorder(trained.model)
    config = training_config(num_epochs=num_epochs, eval_frequency=1, checkpoint_frequency=1, ema_decay=decay)
    best = train(trained, config, work_dir, callbacks=[recorder, *callbacks])
    return initial, recorder, best


def test_the_saved_best_model_is_the_average_and_training_is_unchanged(tmp_path):
    decay = 0.6
    initial, recorder, best = run_with_average(tmp_path / "average", decay)
    _, plain_recorder, _ = run_with_average(tmp_path / "plain", None)
    # The average does not touch the steps: the trained weights are the same as without it.
    assert len(recorder.after_step) == len(plain_recorder.after_step) == 6
    for with_average, without in zip(recorder.after_step, plain_recorder.after_step, strict=True):
        for name in with_average:
            assert torch.equal(with_average[name], without[name]), name
    # The checkpoint holds the trained weights and their average after the last step.
    checkpoint = latest_checkpoint(tmp_path / "average")
    state = load_file(checkpoint / "state.safetensors")
    weights = load_file(checkpoint / "model.safetensors")
    expected = expected_average(initial, recorder.after_step, decay)
    for name, tensor in expected.items():
        assert torch.allclose(state[PREFIX + name], tensor, atol=1e-6), name
        assert torch.equal(weights[name], recorder.after_step[-1][name]), name
    assert any(not torch.allclose(expected[name], recorder.after_step[-1][name]) for name in expected)
    # The best model saved (the one the run returns) is the average at the best dev step.
    best_step = json.loads((checkpoint / "state.json").read_text())["train_state"]["best_step"]
    at_best = expected_average(initial, recorder.after_step[:best_step], decay)
    for name, parameter in best.model.named_parameters():
        assert torch.allclose(parameter, at_best[name], atol=1e-6), name


def test_a_killed_run_resumes_with_its_average(tmp_path):
    decay = 0.6
    run_with_average(tmp_path / "a", decay)
    with pytest.raises(KeyboardInterrupt):
        run_with_average(tmp_path / "b", decay, callbacks=[InterruptAfter(4)])
    assert latest_checkpoint(tmp_path / "b").name == "step-0000004"
    run_with_average(tmp_path / "b", decay)
    uninterrupted = load_file(latest_checkpoint(tmp_path / "a") / "state.safetensors")
    resumed = load_file(latest_checkpoint(tmp_path / "b") / "state.safetensors")
    names = [name for name in uninterrupted if name.startswith(PREFIX)]
    assert names
    for name in names:
        assert torch.equal(uninterrupted[name], resumed[name]), name
