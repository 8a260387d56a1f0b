"""Mixed precision: bf16 (this CPU has it) and fp16 with loss scaling, on fp32 master weights."""

from __future__ import annotations

import math

import pytest
import torch
from lightning_fabric.plugins.precision import MixedPrecision

from coref_pipeline.models.config import ConfigError, TrainingConfig
from coref_pipeline.runtime.devices import DeviceError
from coref_pipeline.training import Run, TrainingCallback, baseline_recipe, fit
from coref_pipeline.training.engine import Engine
from coref_pipeline.training.loop import training_step
from coref_pipeline.training.optim import model_optimisers
from tests.training.distributed import DOCUMENTS, tiny_baseline, training_config


class Losses(TrainingCallback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_step_end(self, state, loss, learning_rates) -> None:
        self.losses.append(loss)


def linear_output_dtypes(model: torch.nn.Module) -> tuple[set[torch.dtype], list]:
    """The dtypes the model's Linear layers compute in, recorded by forward hooks."""
    dtypes: set[torch.dtype] = set()
    hooks = [
        module.register_forward_hook(lambda module, inputs, output: dtypes.add(output.dtype))
        for module in model.modules()
        if isinstance(module, torch.nn.Linear)
    ]
    return dtypes, hooks


def test_bf16_mixed_training_takes_finite_steps_on_fp32_master_weights(tmp_path):
    trained = tiny_baseline(dropout=0.1)
    before = {name: tensor.clone() for name, tensor in trained.model.state_dict().items()}
    config = training_config(devices=1, precision="bf16-mixed", max_steps=6, num_epochs=2)
    dtypes, hooks = linear_output_dtypes(trained.model)
    recorder = Losses()
    run = Run(tmp_path / "run", remove_singletons=False, callbacks=[recorder])
    # fit returns the best model, loaded; the recipe's model is the one that trained
    fit(trained, baseline_recipe(trained, config), DOCUMENTS, DOCUMENTS, config, run)
    for hook in hooks:
        hook.remove()
    assert torch.bfloat16 in dtypes  # the Linear layers ran in bf16 in training
    assert len(recorder.losses) == 6 and all(math.isfinite(loss) and loss > 0 for loss in recorder.losses)
    parameters = dict(trained.model.named_parameters())
    assert all(parameter.dtype == torch.float32 for parameter in parameters.values())
    changed = [name for name in parameters if not torch.equal(parameters[name].detach(), before[name])]
    assert len(changed) > 0.9 * len(parameters)  # every trained weight moved (pooler and unused rows aside)


def test_scores_and_loss_stay_fp32_under_bf16_autocast():
    trained = tiny_baseline(dropout=0.0)
    document = trained.tensorize(DOCUMENTS[0])
    trained.model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        output = trained.model(document)
    assert output.top_antecedent_scores.dtype == torch.float32  # what the marginal likelihood reads
    assert output.loss.dtype == torch.float32 and torch.isfinite(output.loss)


def test_fp16_loss_scaling_unscales_before_clipping_and_steps_on_fp32_weights():
    # Fabric runs 16-mixed on GPUs only; its plugin with a CPU GradScaler exercises the same calls here.
    trained = tiny_baseline(dropout=0.0)
    model = trained.model
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    engine = Engine(TrainingConfig(device="cpu"), plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)])
    optimisers = model_optimisers(model, training_config(), total_steps=20)
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    tensors = [trained.tensorize(document) for document in DOCUMENTS]
    unscaled_norms = []
    clip = torch.nn.utils.clip_grad_norm_

    def recording_clip(parameters, max_norm):
        parameters = list(parameters)
        unscaled_norms.append(
            float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in parameters if p.grad is not None])))
        )
        return clip(parameters, max_norm)

    torch.nn.utils.clip_grad_norm_ = recording_clip
    try:
        model.train()
        losses = [training_step(model.training_losses, document, optimisers, 1.0, engine) for document in tensors]
    finally:
        torch.nn.utils.clip_grad_norm_ = clip
    assert all(math.isfinite(loss) for loss in losses)
    assert scaler.get_scale() > 1.0  # the loss was scaled
    # What was clipped in the first step is the unscaled gradient: the encoder's norm equals that of
    # the same fp16 forward and backward without a scaler (scaled, it would be 1024 times larger).
    reference = tiny_baseline(dropout=0.0).model
    reference.train()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = next(iter(reference.training_losses(tensors[0])))
    loss.backward()
    reference_norm = torch.linalg.vector_norm(
        torch.stack([p.grad.norm() for p in reference.encoder.parameters() if p.grad is not None])
    )
    assert unscaled_norms[0] == pytest.approx(float(reference_norm), rel=0.02)
    assert all(parameter.dtype == torch.float32 for parameter in model.parameters())
    assert any(not torch.equal(tensor, before[name]) for name, tensor in model.state_dict().items())


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_training_on_an_absent_gpu_is_one_line(tmp_path):
    trained = tiny_baseline(dropout=0.0)
    config = training_config(device="cuda", devices=1)
    with pytest.raises(DeviceError) as error:
        fit(trained, baseline_recipe(trained, config), DOCUMENTS, DOCUMENTS, config, Run(tmp_path, False))
    assert "\n" not in str(error.value) and "device 'cuda' was asked for" in str(error.value)
    assert not (tmp_path / "checkpoints").exists()


def test_precision_and_strategy_are_checked():
    assert TrainingConfig.from_dict({"precision": 32}).precision == "32"  # YAML's unquoted 32
    with pytest.raises(
        ConfigError,
        match=r"training key 'precision' must be one of \['auto', '32', 'bf16-mixed', '16-mixed'\], got 'fp8'",
    ):
        TrainingConfig.from_dict({"precision": "fp8"})
    with pytest.raises(ConfigError, match="fsdp is not supported"):
        TrainingConfig.from_dict({"strategy": "fsdp"})
    with pytest.raises(ConfigError, match="training key 'devices' must be at least 1, got 0"):
        TrainingConfig.from_dict({"devices": 0})
