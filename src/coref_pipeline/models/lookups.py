"""Embedding lookups' gradients, counted row by row as TensorFlow's ``IndexedSlices`` count them.

The original (TF 1) looks some embeddings up with ``tf.gather``. The gradient of such a lookup is an
``IndexedSlices``: one row per index looked up, repeated indices not summed, and ``tf.clip_by_global_norm``
takes its norm over those rows. torch's embedding gradient sums the rows of a repeated index into one
dense tensor, whose norm is smaller or larger. A :class:`LookupRows` receives each lookup's output gradient
in the backward pass and keeps the sum of its squares per parameter: the part of the clip's norm that
``optimiser: original`` (:mod:`coref_pipeline.training.optim`) takes from these parameters instead of
their dense gradients.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial

import torch
from torch import nn

# A part of a lookup's output: the parameter looked up, and its columns there (None: all of them).
LookupPart = tuple[nn.Parameter, slice | None]


class LookupRows:
    """The squared gradient rows of each watched lookup, summed per parameter until :meth:`take`."""

    def __init__(self, parameters: Iterable[nn.Parameter]) -> None:
        self.parameters = list(parameters)  # every parameter whose lookups are counted, looked up or not
        self._squares: dict[nn.Parameter, torch.Tensor] = {}

    def watch(self, output: torch.Tensor, parts: Sequence[LookupPart]) -> torch.Tensor:
        """``output`` (``[..., columns]``: rows looked up in the ``parts``' parameters), through an identity whose
        gradient is counted. Each use of a lookup must be watched on its own: a tensor used twice, watched once,
        would sum its two gradients into one row."""
        if not output.requires_grad:
            return output
        view = output.view_as(output)
        view.register_hook(partial(self._count, tuple(parts)))
        return view

    def _count(self, parts: tuple[LookupPart, ...], gradient: torch.Tensor) -> None:
        for parameter, columns in parts:
            rows = gradient if columns is None else gradient[..., columns]
            square = rows.float().pow(2).sum()
            previous = self._squares.get(parameter)
            self._squares[parameter] = square if previous is None else previous + square

    def take(self) -> dict[nn.Parameter, torch.Tensor]:
        """Each counted parameter's summed squared rows since the last call (a zero where it was not looked up)."""
        squares, self._squares = self._squares, {}
        return {
            parameter: squares.get(parameter, parameter.new_zeros((), dtype=torch.float))
            for parameter in self.parameters
        }


def watch_embedding(rows: LookupRows, embedding: nn.Embedding) -> torch.utils.hooks.RemovableHandle:
    """Count every lookup ``embedding`` makes in ``rows`` (a forward hook; remove it with the handle)."""

    def hook(module: nn.Module, inputs: tuple, output: torch.Tensor) -> torch.Tensor:
        return rows.watch(output, [(embedding.weight, None)])

    return embedding.register_forward_hook(hook)
