"""Optimisers and learning-rate schedules: AdamW with warm-up for the encoder, Adam for the task."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import nn

from coref_pipeline.models.config import TrainingConfig

NO_DECAY = ("bias", "LayerNorm.weight", "LayerNorm.bias", "layer_norm")


@dataclass
class Optimisers:
    """The encoder's AdamW and the task parameters' Adam, each with its schedule."""

    encoder: torch.optim.Optimizer | None
    task: torch.optim.Optimizer | None  # None: every parameter is the encoder's (SpanBERT's pretraining)
    encoder_schedule: torch.optim.lr_scheduler.LambdaLR | None
    task_schedule: torch.optim.lr_scheduler.LambdaLR | None
    encoder_parameters: list[nn.Parameter]
    task_parameters: list[nn.Parameter]

    def step(self, gradient_clip: float, precision: Any = None) -> None:
        """Clip each group's gradients (global norm), step, schedule, zero.

        ``precision`` (a training ``Engine``) unscales fp16 gradients before clipping and
        steps through the loss scaler; without it the optimisers step directly.
        """
        for parameters, optimiser, schedule in (
            (self.encoder_parameters, self.encoder, self.encoder_schedule),
            (self.task_parameters, self.task, self.task_schedule),
        ):
            if optimiser is None:
                continue
            if precision is not None:
                precision.unscale(optimiser)
            if gradient_clip:
                torch.nn.utils.clip_grad_norm_(parameters, gradient_clip)
            if precision is not None:
                precision.optimiser_step(optimiser)
            else:
                optimiser.step()
            schedule.step()
            optimiser.zero_grad(set_to_none=True)

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


def warmup_then_linear_decay(total_steps: int, warmup_steps: int) -> Callable[[int], float]:
    """Learning-rate factor: linear warm-up over ``warmup_steps``, then linear decay to 0 at ``total_steps``."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return factor


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
    encoder_parameters: list[nn.Parameter] = []
    encoder_optimiser = encoder_schedule = None
    if encoder is not None:
        decay, no_decay = [], []
        for name, parameter in encoder.named_parameters():
            if parameter.requires_grad:
                (no_decay if any(marker in name for marker in NO_DECAY) else decay).append(parameter)
        encoder_parameters = decay + no_decay
        encoder_optimiser = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": config.weight_decay},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=config.bert_learning_rate,
            eps=config.adam_eps,
            fused=_fused(decay + no_decay),
        )
        encoder_schedule = torch.optim.lr_scheduler.LambdaLR(encoder_optimiser, plan.factor)
    task_parameters = [p for p in task_parameters if p.requires_grad]
    if not task_parameters:  # one AdamW over every parameter
        return Optimisers(encoder_optimiser, None, encoder_schedule, None, encoder_parameters, [])
    task_optimiser = torch.optim.Adam(
        task_parameters, lr=config.task_learning_rate, eps=config.adam_eps, fused=_fused(task_parameters)
    )
    if task_schedule == "linear":
        factor = partial(plan.factor, warmup=task_warmup)
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
    return build_optimisers(encoder, task_parameters, config, total_steps, task_schedule=task_schedule)
