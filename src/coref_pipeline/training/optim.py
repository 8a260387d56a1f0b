"""Optimisers and learning-rate schedules: AdamW with warm-up for the encoder, Adam for the task.

Two flavours (``TrainingConfig.optimiser``):

- ``original``: the original's ``optimization.py`` (TensorFlow 1), as measured by running it
  (``tests/fixtures/tf_checkpoints/tiny_coref_training``): the encoder's ``AdamWeightDecayOptimizer``
  without bias correction, its decay (``weight_decay``) added to the update and scaled by the learning rate,
  none for LayerNorm and bias; the task's ``tf.train.AdamOptimizer`` with bias correction and TensorFlow's
  epsilon 1e-8 (``adam_eps`` is the encoder's alone), its epsilon added to the uncorrected root; the encoder's
  rate warmed up for ``warmup_ratio`` of the steps and then ``lr * (1 - step / total)`` (so it drops at the
  warm-up's end), the task's the same decay without warm-up; each optimiser's gradients clipped on their
  own global norm, where an embedding lookup counts each looked-up row on its own (``IndexedSlices``,
  :mod:`coref_pipeline.models.lookups`).
- ``torch``: torch's ``AdamW`` and ``Adam`` (bias correction for both, ``adam_eps`` for both), the encoder's rate
  warmed up and then decayed linearly from its peak (Hugging Face's schedule), dense gradient norms.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import nn

from coref_pipeline.models.config import ConfigError, TrainingConfig
from coref_pipeline.models.lookups import LookupRows

NO_DECAY = ("bias", "LayerNorm.weight", "LayerNorm.bias", "layer_norm")
# tf.train.AdamOptimizer's default epsilon: the original's task optimiser is built without its adam_eps.
TF_ADAM_EPSILON = 1e-8
ADAM_BETAS = (0.9, 0.999)  # both flavours, both optimisers (the original's and torch's defaults)


@dataclass
class Optimisers:
    """The encoder's AdamW and the task parameters' Adam, each with its schedule."""

    encoder: torch.optim.Optimizer | None
    task: torch.optim.Optimizer | None  # None: every parameter is the encoder's (SpanBERT's pretraining)
    encoder_schedule: torch.optim.lr_scheduler.LambdaLR | None
    task_schedule: torch.optim.lr_scheduler.LambdaLR | None
    encoder_parameters: list[nn.Parameter]
    task_parameters: list[nn.Parameter]
    # optimiser: original: where the model counts its lookups' gradient rows for the clip's norms (one process)
    lookup_rows: LookupRows | None = None
    clip_norms: dict[str, float] | None = None  # optimiser: original: the global norms the last step's clip saw

    def step(self, gradient_clip: float, precision: Any = None) -> None:
        """Clip each group's gradients (global norm), step, schedule, zero.

        ``precision`` (a training ``Engine``) unscales fp16 gradients before clipping and
        steps through the loss scaler; without it the optimisers step directly.
        """
        squares = self.lookup_rows.take() if self.lookup_rows is not None else None
        if squares is not None and precision is not None:
            scale = precision.loss_scale()
            if scale != 1.0:  # the rows were counted from the scaled loss's gradients
                squares = {parameter: square / scale**2 for parameter, square in squares.items()}
        norms = {}
        for name, parameters, optimiser, schedule in (
            ("encoder", self.encoder_parameters, self.encoder, self.encoder_schedule),
            ("task", self.task_parameters, self.task, self.task_schedule),
        ):
            if optimiser is None:
                continue
            if precision is not None:
                precision.unscale(optimiser)
            if squares is not None:
                norm = clip_by_global_norm(parameters, gradient_clip, squares)
                norms[name] = float(norm)
            elif gradient_clip:
                torch.nn.utils.clip_grad_norm_(parameters, gradient_clip)
            if precision is not None:
                precision.optimiser_step(optimiser)
            else:
                optimiser.step()
            schedule.step()
            optimiser.zero_grad(set_to_none=True)
        if squares is not None:
            self.clip_norms = norms

    def follow_plan(self) -> None:
        """Set the current rates from the schedules again (after their ``StepPlan`` changed)."""
        for schedule in (self.encoder_schedule, self.task_schedule):
            if schedule is None:
                continue
            for group, base, factor in zip(
                schedule.optimizer.param_groups, schedule.base_lrs, schedule.lr_lambdas, strict=True
            ):
                group["lr"] = base * factor(schedule.last_epoch)

    def learning_rates(self) -> dict[str, float]:
        rates = {"task_learning_rate": self.task.param_groups[0]["lr"]} if self.task is not None else {}
        if self.encoder is not None:
            rates["bert_learning_rate"] = self.encoder.param_groups[0]["lr"]
        return rates

    def named(self) -> dict[str, torch.optim.Optimizer]:
        return {name: opt for name, opt in (("encoder", self.encoder), ("task", self.task)) if opt is not None}


class StepPlan:
    """The number of steps the schedules run to: fixed, or re-fitted to a time budget as the run goes.

    The schedules read it at every step, so a new ``total_steps`` re-shapes what is left of
    the warm-up (``warmup_ratio`` of the total) and of the linear decay, which ends at 0 at
    ``total_steps``.
    """

    def __init__(self, total_steps: int, warmup_ratio: float = 0.0) -> None:
        self.total_steps = int(total_steps)
        self.warmup_ratio = warmup_ratio

    def factor(self, step: int, warmup: bool = True) -> float:
        """The learning-rate factor at ``step``: warm-up (when ``warmup``), then linear decay."""
        warmup_steps = int(self.total_steps * self.warmup_ratio) if warmup else 0
        return warmup_then_linear_decay(self.total_steps, warmup_steps)(step)

    def original_factor(self, step: int, warmup: bool = True) -> float:
        """The original's factor at ``step`` (``optimization.py``): ``step / warmup_steps`` during the warm-up
        (when ``warmup``), else ``1 - step / total_steps``, never below 0 (TensorFlow's polynomial decay)."""
        warmup_steps = int(self.total_steps * self.warmup_ratio) if warmup else 0
        # In float32, as TensorFlow computes it: near the end, 1 - step / total keeps float32's cancellation.
        if step < warmup_steps:
            return float(np.float32(step) / np.float32(warmup_steps))
        fraction = np.float32(min(step, self.total_steps)) / np.float32(max(1, self.total_steps))
        return max(0.0, float(np.float32(1.0) - fraction))


def warmup_then_linear_decay(total_steps: int, warmup_steps: int) -> Callable[[int], float]:
    """Learning-rate factor: linear warm-up over ``warmup_steps``, then linear decay to 0 at ``total_steps``."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return factor


class TFAdam(torch.optim.Optimizer):
    """Adam as the original's TensorFlow 1 optimisers compute it (``bias_correction`` per group).

    - ``bias_correction`` True, ``tf.train.AdamOptimizer``: ``p -= lr_t * m / (sqrt(v) + eps)`` with
      ``lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)`` (the epsilon is added to the uncorrected root);
    - False, BERT's ``AdamWeightDecayOptimizer``: ``p -= lr * (m / (sqrt(v) + eps) + weight_decay * p)``.

    Its state is torch's Adam's (``step``, ``exp_avg``, ``exp_avg_sq``), so checkpoints keep it as they keep Adam's.
    """

    def __init__(
        self,
        params: Any,
        lr: float,
        eps: float,
        bias_correction: bool,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = ADAM_BETAS,
    ) -> None:
        defaults = {
            "lr": lr,
            "eps": eps,
            "bias_correction": bias_correction,
            "weight_decay": weight_decay,
            "betas": betas,
        }
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:
        if closure is not None:
            raise ValueError("TFAdam takes no closure")
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, eps, decay = group["lr"], group["eps"], group["weight_decay"]
            for parameter in group["params"]:
                if parameter.grad is None:  # no gradient: TensorFlow's optimisers skip the variable
                    continue
                gradient = parameter.grad.float()
                state = self.state[parameter]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(parameter, dtype=torch.float32)
                    state["exp_avg_sq"] = torch.zeros_like(parameter, dtype=torch.float32)
                state["step"] += 1
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(gradient, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(gradient, gradient, value=1 - beta2)
                update = m / (v.sqrt() + eps)
                if group["bias_correction"]:
                    t = float(state["step"])
                    parameter.sub_(update * (lr * math.sqrt(1 - beta2**t) / (1 - beta1**t)))
                else:
                    if decay:
                        update = update + decay * parameter
                    parameter.sub_(update * lr)


def clip_by_global_norm(
    parameters: Sequence[nn.Parameter], clip: float, lookup_squares: dict[nn.Parameter, torch.Tensor]
) -> torch.Tensor:
    """``tf.clip_by_global_norm`` of the parameters' gradients: scaled by ``clip / max(norm, clip)`` (none when
    ``clip`` is 0); a parameter of ``lookup_squares`` enters the norm by its lookups' rows (its summed squares
    there), the others by their dense gradients. The norm, before clipping, summed in float32 on the parameters'
    device in their order and read back once."""
    gradients = [parameter.grad for parameter in parameters if parameter.grad is not None]
    device = parameters[0].device if parameters else torch.device("cpu")
    total = torch.zeros((), dtype=torch.float32, device=device)
    for parameter in parameters:
        square = lookup_squares.get(parameter)
        if square is not None:
            total = total + square.float().to(device)
        elif parameter.grad is not None:
            total = total + parameter.grad.float().pow(2).sum()
    norm = total.sqrt().cpu()
    if clip and gradients:
        scale = clip / max(float(norm), clip)
        if scale != 1.0:
            torch._foreach_mul_(gradients, scale)
    return norm


def _fused(parameters: Sequence[nn.Parameter]) -> bool | None:
    """Fused Adam kernels (several times faster on a CPU) where every parameter is a float tensor."""
    return True if parameters and all(p.dtype in (torch.float32, torch.float64) for p in parameters) else None


def build_optimisers(
    encoder: nn.Module | None,
    task_parameters: Sequence[nn.Parameter],
    config: TrainingConfig,
    total_steps: int | StepPlan,
    task_warmup: bool = False,
    task_schedule: str = "linear",
) -> Optimisers:
    """AdamW (weight decay, none on LayerNorm and bias) with warm-up for the encoder; Adam for the task.

    ``total_steps``: a number, or a :class:`StepPlan` the schedules follow as it changes.
    ``task_schedule`` is ``"linear"`` (decay to 0 at the total, the baseline's) or ``"constant"``.
    """
    plan = total_steps if isinstance(total_steps, StepPlan) else StepPlan(total_steps, config.warmup_ratio)
    original = config.optimiser == "original"
    schedule_factor = plan.original_factor if original else plan.factor
    encoder_parameters: list[nn.Parameter] = []
    encoder_optimiser = encoder_schedule = None
    if encoder is not None:
        decay, no_decay = [], []
        for name, parameter in encoder.named_parameters():
            if parameter.requires_grad:
                (no_decay if any(marker in name for marker in NO_DECAY) else decay).append(parameter)
        encoder_parameters = decay + no_decay
        groups = [
            {"params": decay, "weight_decay": config.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        if original:  # BERT's AdamWeightDecayOptimizer
            encoder_optimiser = TFAdam(groups, lr=config.bert_learning_rate, eps=config.adam_eps, bias_correction=False)
        else:
            encoder_optimiser = torch.optim.AdamW(
                groups, lr=config.bert_learning_rate, eps=config.adam_eps, fused=_fused(decay + no_decay)
            )
        encoder_schedule = torch.optim.lr_scheduler.LambdaLR(encoder_optimiser, schedule_factor)
    task_parameters = [p for p in task_parameters if p.requires_grad]
    if not task_parameters:  # one AdamW over every parameter
        return Optimisers(encoder_optimiser, None, encoder_schedule, None, encoder_parameters, [])
    if original:  # tf.train.AdamOptimizer(learning_rate): its own epsilon, not adam_eps
        task_optimiser = TFAdam(
            task_parameters, lr=config.task_learning_rate, eps=TF_ADAM_EPSILON, bias_correction=True
        )
    else:
        task_optimiser = torch.optim.Adam(
            task_parameters, lr=config.task_learning_rate, eps=config.adam_eps, fused=_fused(task_parameters)
        )
    if task_schedule == "linear":
        factor = partial(schedule_factor, warmup=task_warmup)
    elif task_schedule == "constant":
        factor = _constant
    else:
        raise ValueError(f"task_schedule must be 'linear' or 'constant', got {task_schedule!r}")
    task_scheduler = torch.optim.lr_scheduler.LambdaLR(task_optimiser, factor)
    return Optimisers(
        encoder_optimiser, task_optimiser, encoder_schedule, task_scheduler, encoder_parameters, task_parameters
    )


def _constant(step: int) -> float:
    return 1.0


def model_optimisers(
    model: nn.Module,
    config: TrainingConfig,
    total_steps: int | StepPlan,
    train_encoder: bool = True,
    task_schedule: str = "linear",
) -> Optimisers:
    """``build_optimisers`` for a coreference model: its ``encoder`` (when trained) and its ``task_modules()``."""
    task_parameters = [parameter for module in model.task_modules() for parameter in module.parameters()]
    encoder = model.encoder if train_encoder else None
    optimisers = build_optimisers(encoder, task_parameters, config, total_steps, task_schedule=task_schedule)
    if config.optimiser == "original":
        if not hasattr(model, "count_lookup_rows"):
            raise ConfigError(
                f"optimiser: original is the baseline's (Joshi et al.'s TensorFlow code); "
                f"{type(model).__name__} trains with optimiser: torch"
            )
        if config.world_size == 1:  # several processes: dense norms (each rank's rows would clip each rank apart)
            optimisers.lookup_rows = LookupRows(model.lookup_parameters())
        model.count_lookup_rows(optimisers.lookup_rows)
    return optimisers
