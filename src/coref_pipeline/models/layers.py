"""Layers shared by the models: the original's dropout, initialisation and FFNN."""

from __future__ import annotations

import torch
from torch import nn


def uniform_integers(shape: torch.Size, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Uniform random integers over all of ``dtype``'s values (uint8, int16, ...): ``[*shape]``.

    Drawn as 64-bit words viewed as the narrow type, several per word: cheaper on a CPU than
    one ``bernoulli_`` or ``rand`` draw per element. Dropout masks compare these to a threshold.
    """
    count = shape.numel()
    per_word = 8 // torch.empty(0, dtype=dtype).element_size()
    words = torch.randint(-(2**63), 2**63 - 1, (-(-count // per_word),), dtype=torch.int64, device=device)
    values = words.view(dtype)
    return (values if values.shape[0] == count else values[:count]).view(shape)


class Dropout(nn.Module):
    """Inverted dropout with rate ``round(256 p) / 256`` (0.3008 for 0.3), one random byte per element."""

    def __init__(self, rate: float) -> None:
        super().__init__()
        self.rate = rate
        self.threshold = round(rate * 256)

    @property
    def active(self) -> bool:
        return self.training and self.threshold > 0

    @property
    def scale(self) -> float:
        """What a kept element is multiplied by: ``256 / (256 - threshold)``."""
        return 256.0 / (256 - self.threshold)

    def forward(self, inputs: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """Dropout with ``keep`` (a mask from ``keep_mask``), or with a mask drawn now (None)."""
        if not self.active:
            return inputs
        return self.unscaled(inputs, keep) * self.scale

    def keep_mask(self, shape: torch.Size | tuple[int, ...], device: torch.device) -> torch.Tensor:
        """A bool mask of the elements kept, as ``unscaled`` draws it: ``[*shape]``."""
        # One random byte per element: ~3x cheaper than bernoulli_ on a CPU.
        return uniform_integers(torch.Size(shape), torch.uint8, device) >= self.threshold

    def unscaled(self, inputs: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """The inputs with the dropped elements zeroed, not yet multiplied by ``scale`` (identity when inactive).

        For a caller that folds the scale into the next linear map: one pass fewer over a
        large tensor forward, and one fewer backward. ``keep``: a mask drawn earlier (``keep_mask``);
        None draws one.
        """
        if not self.active:
            return inputs
        if keep is None:
            keep = self.keep_mask(inputs.shape, inputs.device)  # [*inputs.shape] bool
        # Autograd keeps the bool mask (one byte an element) for the backward pass, as a hand-written one would.
        return inputs * keep


def init_weights(module: nn.Module) -> None:
    """Truncated normal (std 0.02) weights and zero biases, as the original."""
    for name, parameter in module.named_parameters(recurse=False):
        if name == "bias":
            nn.init.zeros_(parameter)
        else:
            nn.init.trunc_normal_(parameter, std=0.02, a=-0.04, b=0.04)


class FFNN(nn.Module):
    """``depth`` hidden ReLU layers with dropout, then a linear output layer."""

    def __init__(self, input_size: int, hidden_size: int, depth: int, output_size: int, dropout: float) -> None:
        super().__init__()
        sizes = [input_size] + [hidden_size] * depth
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True))
        self.output = nn.Linear(sizes[-1], output_size)
        self.dropout = Dropout(dropout)
        for layer in [*self.hidden, self.output]:
            init_weights(layer)

    def forward(self, inputs: torch.Tensor, keep_masks: list[torch.Tensor] | None = None) -> torch.Tensor:
        return self.from_first_layer(self.hidden[0](inputs), keep_masks=keep_masks)

    def keep_masks(self, rows: int, device: torch.device) -> list[torch.Tensor]:
        """The dropout masks ``from_first_layer`` applies to ``rows`` inputs, drawn now: one ``[rows, hidden]``
        per hidden layer (none when dropout is inactive). Rows of them score a subset of the rows again
        with the same masks."""
        if not self.dropout.active:
            return []
        return [self.dropout.keep_mask((rows, layer.out_features), device) for layer in self.hidden]

    def from_first_layer(
        self, pre_activation: torch.Tensor, overwrite: bool = False, keep_masks: list[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """The rest of the network, given the first hidden layer before its ReLU.

        The last dropout's scale is applied after the output layer, to its ``[rows, 1]``
        result (``W (s h) + b = s (W h) + b``), not to the ``[rows, hidden]`` activations.
        ``overwrite``: the caller does not use ``pre_activation`` again, so when autograd does not
        track it (prediction) it is rectified in place, one ``[rows, hidden]`` tensor fewer.
        ``keep_masks``: the dropout masks to apply (``keep_masks``); None draws them.
        """
        masks = keep_masks if keep_masks is not None and self.dropout.active else [None] * len(self.hidden)
        if overwrite and not pre_activation.requires_grad:
            hidden = pre_activation.relu_()
        else:
            hidden = torch.relu(pre_activation)
        for layer, keep in zip(self.hidden[1:], masks, strict=False):
            hidden = torch.relu(layer(self.dropout(hidden, keep)))
        if not self.dropout.active:
            return self.output(hidden)
        unscaled = torch.nn.functional.linear(self.dropout.unscaled(hidden, masks[-1]), self.output.weight)
        return unscaled * self.dropout.scale + self.output.bias
