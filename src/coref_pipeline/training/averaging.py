"""An exponential moving average of a model's trained weights, evaluated and kept in their place.

With ``ema_decay`` set, a run keeps, beside the weights the optimisers step, their
moving average (in float32, on the weights' device)::

    average <- d_t * average + (1 - d_t) * weights,   d_t = min(ema_decay, (1 + t) / (10 + t))

after the ``t``-th optimiser step. The warm-up of ``d_t`` (TensorFlow's
``ExponentialMovingAverage`` with ``num_updates``) lets the average follow the
weights closely in the first steps, when they move fast. The dev evaluations score
the average, and the best model saved is the average; the steps go on from the
optimisers' own weights. A checkpoint keeps both, so a killed run resumes with its average.

Only the weights the optimisers train are averaged (a frozen encoder is left as it is).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import torch
from torch import nn

PREFIX = "average."  # the average's tensors in a checkpoint's state.safetensors


def ema_decay_at(decay: float, step: int) -> float:
    """The decay after the ``step``-th optimiser step (1 for the first): ``min(decay, (1 + step) / (10 + step))``."""
    return min(decay, (1 + step) / (10 + step))


class WeightAverage:
    """The moving average of ``model``'s trainable weights (``ema_decay``, above)."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"ema_decay must be in [0, 1), got {decay}")
        self.decay = decay
        self.parameters = {name: p for name, p in model.named_parameters() if p.requires_grad}
        with torch.no_grad():
            self.average = {name: p.detach().to(torch.float32, copy=True) for name, p in self.parameters.items()}

    @torch.no_grad()
    def update(self, step: int) -> None:
        """Move the average towards the weights after the ``step``-th optimiser step."""
        weight = 1.0 - ema_decay_at(self.decay, step)
        for name, parameter in self.parameters.items():
            self.average[name].lerp_(parameter.detach().to(torch.float32), weight)

    @contextmanager
    def in_place_of_weights(self) -> Iterator[None]:
        """The average in the model's weights for the block (evaluate, save); the weights back after it."""
        with torch.no_grad():
            weights = {name: p.detach().clone() for name, p in self.parameters.items()}
            for name, parameter in self.parameters.items():
                parameter.copy_(self.average[name])
        try:
            yield
        finally:
            with torch.no_grad():
                for name, parameter in self.parameters.items():
                    parameter.copy_(weights[name])

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The average as named tensors, for a checkpoint."""
        return {PREFIX + name: tensor for name, tensor in self.average.items()}

    def load_state_tensors(self, tensors: Mapping[str, torch.Tensor], where: str) -> None:
        """Restore the average from a checkpoint's tensors (``where`` names the checkpoint in an error)."""
        missing = sorted(name for name in self.average if PREFIX + name not in tensors)
        if missing:
            raise ValueError(
                f"{where}: the checkpoint has no weight average for {len(missing)} weights "
                f"(first: {missing[0]}); it was written by a run without ema_decay"
            )
        with torch.no_grad():
            for name, tensor in self.average.items():
                tensor.copy_(tensors[PREFIX + name])
