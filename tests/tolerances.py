"""How far apart float32 results computed two ways may be: the tolerances the tests derive, in one place.

A result computed twice by the same code on the same shapes, with the same kernels and thread count,
is compared exactly: that is the same sequence of roundings. A result computed two ways (another process
layout or thread count, one batch against one document at a time, other matrix shapes, which a GEMM
blocks and splits differently, another kernel) is compared within what float32 guarantees for the sums
whose order changed, and nothing looser:

* ``reordered(terms)``: a sum of K float32 terms taken in another order differs by at most about
  K * eps * sum(|term|) (Higham's gamma_K, with eps = 2 u, so a factor 2 to spare). Through a network the
  relative errors of its reductions add up, so ``terms`` is the sum of the reduction lengths along the
  longest chain (the input widths of the layers that changed order), and the terms' magnitude is taken
  as the compared tensor's largest value (these tiny models' activations and scores are of order one).
* ``adam_reach``: Adam normalises each gradient by its own running size, so a step moves a parameter by
  about the learning rate whatever the gradient's size, and two computations of the same training agree
  only to the relative error of their gradients times the distance the steps could go: ``adam_reach``
  is that distance. A parameter whose exact gradient is zero (``SOFTMAX_SHIFTS``) has a computed gradient
  of rounding noise alone, which Adam turns into full-size steps: its value is compared by what it means
  (the function it cannot change, and the distance Adam could have taken it), never to the last bit.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch

EPS = torch.finfo(torch.float32).eps  # 2^-23

# Parameters whose exact gradient is zero: each adds one constant to every logit of a softmax, which is
# invariant to it (tests/models/test_scorers.py checks both, in float64).
SOFTMAX_SHIFTS = (
    "mention_word_attn.bias",  # the head-word attention over a span's tokens
    "attention.self.key.bias",  # self-attention: q . b_key is the same for every key a query attends to
)


def is_softmax_shift(name: str) -> bool:
    return any(name.endswith(suffix) for suffix in SOFTMAX_SHIFTS)


def reordered(terms: int) -> float:
    """The relative difference two float32 computations of a sum of ``terms`` terms, in two orders, may have."""
    return terms * EPS


def ffnn_terms(ffnn: torch.nn.Module) -> int:
    """The reduction lengths along an FFNN (``models.layers.FFNN``): each layer's input width, summed."""
    return sum(layer.in_features for layer in [*ffnn.hidden, ffnn.output])


def assert_reordered_close(actual: torch.Tensor, expected: torch.Tensor, terms: int, msg: str | None = None) -> None:
    """``actual`` and ``expected`` (float32, computed two ways) agree to ``reordered(terms)`` of their scale.

    The scale is the largest magnitude in ``expected`` (of its finite values; infinities must match)."""
    finite = expected.detach()[torch.isfinite(expected.detach())]
    scale = float(finite.abs().max()) if finite.numel() else 0.0
    bound = reordered(terms)
    torch.testing.assert_close(actual, expected, rtol=bound, atol=bound * scale, msg=msg)


def gradient_spreads(expected: Mapping[str, torch.Tensor], terms: int) -> dict[str, torch.Tensor]:
    """How far each parameter gradient computed in another order may lie from ``expected`` (by parameter name),
    elementwise: ``reordered(terms)`` of the gradient's own largest element and of the element's size; a softmax
    shift's (zero in exact arithmetic, so both are rounding noise) of the largest gradient of all: its terms are the
    logits' gradients, which the other gradients sum too."""
    bound = reordered(terms)
    largest = max(float(gradient.abs().max()) for gradient in expected.values())
    return {
        name: bound * ((largest if is_softmax_shift(name) else float(gradient.abs().max())) + gradient.abs())
        for name, gradient in expected.items()
    }


def assert_within(actual: torch.Tensor, expected: torch.Tensor, spread: torch.Tensor, msg: Any = None) -> None:
    """``actual`` lies within ``spread`` of ``expected``, elementwise (the same shapes)."""
    assert actual.shape == expected.shape, (msg, actual.shape, expected.shape)
    beyond = (actual - expected).abs() - spread
    assert bool((beyond <= 0).all()), (
        f"{msg}: {int((beyond > 0).sum())} elements past the bound, by {float(beyond.max()):.3g}"
    )


def assert_gradients_reordered_close(
    actual: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor], terms: int
) -> None:
    """Parameter gradients computed two ways, each within its ``gradient_spreads``."""
    assert actual.keys() == expected.keys()
    for name, spread in gradient_spreads(expected, terms).items():
        assert_within(actual[name], expected[name], spread, name)


def adam_step_bound(step: int, betas: tuple[float, float]) -> float:
    """The largest |m_hat| / sqrt(v_hat) Adam's ``step``-th update can have, over every gradient sequence.

    m_hat = sum_i w_i g_i and v_hat = sum_i z_i g_i^2 with the bias-corrected weights w_i, z_i (each summing
    to 1), so by Cauchy-Schwarz |m_hat| <= sqrt(sum_i w_i^2 / z_i) sqrt(v_hat): 1 at the first step, a
    little over 1 at the next few (eps in the denominator only makes the update smaller).
    """
    beta1, beta2 = betas
    total = 0.0
    for i in range(1, step + 1):
        w = (1 - beta1) * beta1 ** (step - i) / (1 - beta1**step)
        z = (1 - beta2) * beta2 ** (step - i) / (1 - beta2**step)
        total += w * w / z
    return math.sqrt(total)


def adam_reach(optimisers, steps: int, names: Mapping[torch.nn.Parameter, str]) -> dict[str, float]:
    """How far ``steps`` steps of the run's Adam optimisers can move each of their parameters: the sum over the
    steps of the rate the schedule gives it times ``adam_step_bound`` (weight decay aside: the comparisons
    use it where both computations decay the same weights alike). ``optimisers`` is a ``training.optim.Optimisers``
    as built (its schedules at step 0); ``names`` names the parameters."""
    reach: dict[str, float] = {}
    pairs = ((optimisers.encoder, optimisers.encoder_schedule), (optimisers.task, optimisers.task_schedule))
    for optimiser, schedule in pairs:
        if optimiser is None:
            continue
        for group, base, factor in zip(optimiser.param_groups, schedule.base_lrs, schedule.lr_lambdas, strict=True):
            # The step t (from 1) takes the rate of the schedule's epoch t - 1.
            distance = sum(base * factor(t - 1) * adam_step_bound(t, group["betas"]) for t in range(1, steps + 1))
            for parameter in group["params"]:
                reach[names[parameter]] = distance
    return reach


def assert_trained_alike(
    actual: Mapping[str, torch.Tensor],
    expected: Mapping[str, torch.Tensor],
    start: Mapping[str, torch.Tensor],
    reach: Mapping[str, float],
    terms: int,
    steps: int,
) -> None:
    """Weights trained from ``start`` by the same Adam steps on gradients computed two ways agree.

    A parameter no optimiser holds (not in ``reach``: frozen, a buffer) is unchanged and compared exactly.
    A trained one's gradients differ by ``reordered(terms)`` of their size, which changes each normalised
    Adam update by at most twice that (m_hat and sqrt(v_hat) each move by it, to first order): the weights
    differ by at most ``2 * reordered(terms) * reach``. A softmax shift (its exact gradient is zero) is
    compared by what it means: the function is invariant to its value, and each run moved it at most Adam's
    reach from its start (these biases take no weight decay), give or take the rounding of the ``steps`` steps
    themselves: a few eps of each update (a square root, a division, two products), and half an eps of the
    weight at each addition.
    """
    assert actual.keys() == expected.keys() == start.keys()
    for name in expected:
        if name not in reach:
            assert torch.equal(actual[name], expected[name]), name
            assert torch.equal(expected[name], start[name]), name
        elif is_softmax_shift(name):
            furthest = float(start[name].abs().max()) + reach[name]
            bound = reach[name] * (1 + 4 * EPS) + steps * EPS / 2 * furthest
            for weights in (actual, expected):
                moved = float((weights[name] - start[name]).abs().max())
                assert moved <= bound, f"{name} moved {moved:.3g} from its start; Adam reaches {bound:.3g}"
        else:
            bound = 2 * reordered(terms) * reach[name]
            torch.testing.assert_close(actual[name], expected[name], rtol=0, atol=bound, msg=name)


def head_terms(model: torch.nn.Module) -> int:
    """The reduction lengths along a baseline's head (``BaselineCorefModel``), for its scores computed in products of
    other shapes (several documents' together): the mention FFNN, the coarse scorer's projection and bilinear
    product, the pair FFNN. For the incremental model's span scorer (the same mention FFNN, the span attention over
    at most ``span_dim`` terms), a bound above its own."""
    return (
        ffnn_terms(model.span_scorer.mention_scores)
        + 2 * model.span_dim
        + ffnn_terms(model.pair_scorer.slow_antecedent_scores)
    )


def near_tie(scores: torch.Tensor, terms: int) -> bool:
    """Whether some row of ``scores`` (``[k, c + 1]``: each span's dummy and antecedents) holds two finite scores within
    twice the float bound of ``terms`` reordered terms of each other: a decision that float32's rounding may tip."""
    finite = scores[torch.isfinite(scores)]
    margin = 2 * reordered(terms) * (float(finite.abs().max()) if finite.numel() else 0.0)
    for row in scores:
        values = row[torch.isfinite(row)].sort().values
        if values.numel() > 1 and bool((values.diff() <= margin).any()):
            return True
    return False


def pruning_near_tie(
    scores: torch.Tensor,
    starts: torch.Tensor,
    ends: torch.Tensor,
    kept: Sequence[tuple[int, int]],
    terms: int,
    crossing: bool,
) -> bool:
    """Whether float32's rounding within the bound of ``terms`` reordered terms may change the spans pruning keeps
    from candidates (``starts``, ``ends``, ``scores``: ``[candidates]``, scored alone) whose kept spans were ``kept``.
    Pruning takes the candidates in descending score, skipping one that crosses a kept span (unless ``crossing``),
    until it has its number: two candidates' order can tip only where their scores lie within twice the bound, and
    the kept set changes only where such a pair crosses (one of them above the last kept span), or where a candidate
    not kept lies that close to the last kept one."""
    finite = scores[torch.isfinite(scores)]
    margin = 2 * reordered(terms) * (float(finite.abs().max()) if finite.numel() else 0.0)
    order = torch.argsort(scores, descending=True, stable=True)
    values, spans = scores[order].tolist(), list(zip(starts[order].tolist(), ends[order].tolist(), strict=True))
    chosen = set(kept)
    last = max((rank for rank, span in enumerate(spans) if span in chosen), default=-1)  # the last kept span's rank
    if last < 0:
        return False
    if any(values[rank] >= values[last] - margin for rank in range(last + 1, len(spans)) if spans[rank] not in chosen):
        return True
    for rank in range(last + 1 if not crossing else 0):
        (s1, e1), later = spans[rank], rank + 1
        while later < len(spans) and values[later] >= values[rank] - margin:
            s2, e2 = spans[later]
            if s1 < s2 <= e1 < e2 or s2 < s1 <= e2 < e1:
                return True
            later += 1
    return False


def same_spans_or_near_tie(
    kept: list[tuple[int, int]],
    kept_alone: list[tuple[int, int]],
    candidates: tuple,
    terms: int,
    crossing: bool,
    msg: Any = None,
) -> bool:
    """Whether the spans kept in products of other shapes (``kept``) are those kept alone (``kept_alone``). Where they
    differ, asserts that they are as many of the same candidates (``candidates``: their mention scores, starts and
    ends alone) and that a rounding within the float bound could have changed them (``pruning_near_tie``). Returns
    whether they are the same (what reads the spans can then be compared)."""
    same = kept == kept_alone
    if not same:
        scores, starts, ends = candidates
        assert len(kept) == len(kept_alone), msg
        assert set(kept) <= set(zip(starts.tolist(), ends.tolist(), strict=True)), msg
        assert pruning_near_tie(scores, starts, ends, kept_alone, terms, crossing), msg
    return same


def antecedent_near_tie(coarse: torch.Tensor, c: int, floor: float | None, terms: int) -> torch.Tensor:
    """Which spans' antecedents float32's rounding within the bound of ``terms`` reordered terms may change: their set,
    their order, or which of them score above the coarse ``floor`` (``coarse``: ``[k, k]``, scored alone; each row's
    ``c`` best are its antecedents, best first). A row may tip where two of its ``c + 1`` best finite scores lie
    within twice the bound of each other, or one of its ``c`` best that close to the floor. ``[k]`` bool."""
    finite = coarse[torch.isfinite(coarse)]
    margin = 2 * reordered(terms) * (float(finite.abs().max()) if finite.numel() else 0.0)
    best = coarse.topk(min(c + 1, coarse.shape[-1]), dim=-1).values  # [k, c + 1], descending
    tie = ((best[:, :-1] - best[:, 1:] <= margin) & torch.isfinite(best[:, 1:])).any(dim=-1)  # [k]
    if floor is not None:
        top = best[:, :c]
        tie |= (torch.isfinite(top) & ((top - floor).abs() <= margin)).any(dim=-1)
    return tie


def same_antecedents_or_near_tie(
    together: Any, alone: Any, coarse: torch.Tensor, floor: float | None, terms: int, msg: Any = None
) -> bool:
    """Whether a baseline's antecedents computed in products of other shapes (``together``: its ``CorefOutput``) are
    those computed alone (``alone``, whose coarse scores were ``coarse``, ``[k, k]``): the same antecedents in the
    same order, the same mask, the same pairs scored above the ``floor``. Where they differ, asserts that every span
    whose row differs had a near tie alone (``antecedent_near_tie``). Returns whether they are the same (their
    scores and the clusters can then be compared)."""
    assert together.top_antecedents.shape == alone.top_antecedents.shape, msg
    differs = (
        (together.top_antecedents != alone.top_antecedents).any(dim=-1)
        | (together.top_antecedent_mask != alone.top_antecedent_mask).any(dim=-1)
        | (torch.isfinite(together.top_antecedent_scores) != torch.isfinite(alone.top_antecedent_scores)).any(dim=-1)
    )  # [k]
    if not differs.any():
        return True
    ties = antecedent_near_tie(coarse, alone.top_antecedents.shape[1], floor, terms)
    assert bool(ties[differs].all()), (msg, differs.nonzero().flatten().tolist())
    return False


def same_baseline_decisions_or_near_tie(
    together: Any, alone: Any, coarse: torch.Tensor, floor: float | None, terms: int, msg: Any = None
) -> bool:
    """A baseline's ``CorefOutput`` computed in products of other shapes (``together``) against the same document's
    alone (``alone``, whose coarse scores were ``coarse``): the same kept spans but at a near tie in the candidates'
    mention scores (``same_spans_or_near_tie``), then the same antecedents but at a near tie in a span's coarse scores
    (``same_antecedents_or_near_tie``). Returns whether both are the same: what reads them can then be compared."""
    kept = [list(zip(o.top_span_starts.tolist(), o.top_span_ends.tolist(), strict=True)) for o in (together, alone)]
    candidates = (alone.candidate_mention_scores, alone.candidate_starts, alone.candidate_ends)
    if not same_spans_or_near_tie(*kept, candidates, terms, False, msg):
        return False
    return same_antecedents_or_near_tie(together, alone, coarse, floor, terms, msg)


def assert_parts_reordered_close(
    actual: Sequence[torch.Tensor | None], expected: Sequence[torch.Tensor | None], terms: int, msg: Any = None
) -> None:
    """The parts of a tuple computed two ways (``None`` where a part is not computed, on both sides alike), each
    within ``reordered(terms)`` of its scale (``assert_reordered_close``)."""
    for actual_part, expected_part in zip(actual, expected, strict=True):
        assert (actual_part is None) == (expected_part is None), msg
        if expected_part is not None:
            assert_reordered_close(actual_part, expected_part, terms, msg=msg)


@contextmanager
def recorded_coarse_scores(baseline: torch.nn.Module) -> Iterator[list[torch.Tensor]]:
    """The coarse scores (``[..., k, k]``) each forward pass of ``baseline`` (a ``BaselineCorefModel``) ranks its
    antecedents by, recorded in order: what ``same_antecedents_or_near_tie`` reads."""
    recorded: list[torch.Tensor] = []
    rank = baseline.top_antecedents

    def recording(coarse: torch.Tensor) -> Any:
        recorded.append(coarse.detach().clone())
        return rank(coarse)

    baseline.top_antecedents = recording
    try:
        yield recorded
    finally:
        del baseline.top_antecedents
