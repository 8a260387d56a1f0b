"""The tests' own bounds (``tests/tolerances.py``) held to what they claim: where ``pruning_near_tie`` finds no
near tie, no rounding within the bound changes the spans that ``prune_spans`` keeps; where ``antecedent_near_tie``
finds none in a span's row, no rounding within the bound changes the antecedents the baseline ranks for it."""

from __future__ import annotations

import functools

import pytest
import torch

from coref_pipeline.models.baseline import BaselineCorefModel
from coref_pipeline.models.spans import prune_spans
from tests.models.tiny import tiny_config, tiny_encoder
from tests.tolerances import antecedent_near_tie, pruning_near_tie, reordered


def kept_spans(scores: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor, k: int, crossing: bool) -> list:
    kept: list[tuple[int, int]] = []
    prune_spans(scores, starts, ends, k, kept, crossing)
    return kept


def tipped_by_rounding(decide, scores: torch.Tensor, bound: float, generator: torch.Generator) -> list[bool]:
    """Which of the decisions ``decide(scores)`` gives (a list) change when every score moves by up to ``bound``, in
    any of 30 draws."""
    decided = decide(scores)
    tipped = [False] * len(decided)
    for _ in range(30):
        moved = scores + (torch.rand(scores.shape, generator=generator) * 2 - 1) * bound
        for index, (before, after) in enumerate(zip(decided, decide(moved), strict=True)):
            tipped[index] |= before != after
    return tipped


def untipped_and_tipped(ties: list[bool], tipped: list[bool]) -> tuple[int, int]:
    """Asserts that no decision without a near tie tipped; returns how many had none, and how many tipped."""
    for tie, tip in zip(ties, tipped, strict=True):
        assert tie or not tip
    return sum(not tie for tie in ties), sum(tipped)


@pytest.mark.parametrize("crossing", [False, True])
def test_without_a_near_tie_no_rounding_within_the_bound_changes_the_kept_spans(crossing):
    """Random candidates whose scores lie on a coarse grid (two of them equal or far apart), each scored again with
    every score moved by up to the float bound: where the helper finds no near tie, every such rounding keeps the
    same spans; and the roundings do tip some of the ties it finds."""
    generator = torch.Generator().manual_seed(0)
    terms = 1000
    found_untipped, found_tipped = 0, 0
    for _ in range(200):
        starts = torch.randint(0, 30, (60,), generator=generator)
        ends = starts + torch.randint(0, 5, (60,), generator=generator)
        pairs = sorted(set(zip(starts.tolist(), ends.tolist(), strict=True)))
        starts, ends = torch.tensor([s for s, _ in pairs]), torch.tensor([e for _, e in pairs])
        scores = torch.randint(0, 40, (len(pairs),), generator=generator).float() * 0.01 + 1.0
        k = 12
        kept = kept_spans(scores, starts, ends, k, crossing)
        bound = reordered(terms) * float(scores.abs().max())  # a rounding moves each score by up to this
        ties = [pruning_near_tie(scores, starts, ends, kept, terms, crossing)]
        prune = functools.partial(kept_spans, starts=starts, ends=ends, k=k, crossing=crossing)
        tipped = tipped_by_rounding(lambda moved, prune=prune: [prune(moved)], scores, bound, generator)
        untipped, tips = untipped_and_tipped(ties, tipped)
        found_untipped, found_tipped = found_untipped + untipped, found_tipped + tips
    assert found_untipped and found_tipped  # both cases seen


def test_a_near_tie_is_found_where_pruning_may_tip_and_not_elsewhere():
    terms = 100
    step = 10 * reordered(terms)  # far beyond the bound of scores of order one
    # Two crossing spans scored alike: which one is kept depends on the rounding.
    starts, ends = torch.tensor([0, 2, 6]), torch.tensor([3, 5, 7])
    scores = torch.tensor([1.0, 1.0, 1.0 - step])
    assert pruning_near_tie(scores, starts, ends, kept_spans(scores, starts, ends, 2, False), terms, False)
    # ... unless crossing spans may both be kept: then only the count's boundary matters.
    assert not pruning_near_tie(scores, starts, ends, kept_spans(scores, starts, ends, 3, True), terms, True)
    # The last kept span and the best one left out scored alike.
    starts, ends = torch.tensor([0, 2, 6]), torch.tensor([1, 3, 7])
    scores = torch.tensor([1.0 + step, 1.0, 1.0])
    assert pruning_near_tie(scores, starts, ends, kept_spans(scores, starts, ends, 2, False), terms, False)
    # Two spans that do not cross, both kept, scored alike: no rounding changes what is kept.
    scores = torch.tensor([1.0, 1.0, 1.0 - step])
    assert not pruning_near_tie(scores, starts, ends, kept_spans(scores, starts, ends, 2, False), terms, False)


def ranked_antecedents(model: BaselineCorefModel, coarse: torch.Tensor, floor: float) -> list[tuple]:
    """Each span's antecedents as the baseline ranks them from ``coarse`` (``[k, k]``), in order, with the mask and
    which of them score above ``floor``: everything of a row that the coarse scores decide."""
    antecedents, mask, top_coarse = model.top_antecedents(coarse)
    scored = top_coarse > floor
    return list(zip(antecedents.tolist(), mask.tolist(), scored.tolist(), strict=True))


def test_without_an_antecedent_near_tie_no_rounding_within_the_bound_changes_a_spans_antecedents():
    """Random coarse scores on a coarse grid (two of them equal or far apart), the later spans' columns -inf as the
    baseline masks them, each ranked again with every score moved by up to the float bound: in every row where the
    helper finds no near tie, every such rounding gives the same antecedents, order, mask and pairs above the floor;
    and the roundings do tip some of the rows it finds."""
    model = BaselineCorefModel(tiny_config(max_top_antecedents=6), tiny_encoder()).eval()
    generator = torch.Generator().manual_seed(0)
    terms, k, floor = 1000, 14, 1.1
    found_untipped, found_tipped = 0, 0
    for _ in range(100):
        coarse = torch.randint(0, 40, (k, k), generator=generator).float() * 0.01 + 1.0
        coarse = coarse.masked_fill(torch.ones(k, k, dtype=torch.bool).triu(), float("-inf"))  # [k, k]
        bound = reordered(terms) * float(coarse[torch.isfinite(coarse)].abs().max())
        ties = antecedent_near_tie(coarse, min(6, k), floor, terms).tolist()
        tipped = tipped_by_rounding(lambda s: ranked_antecedents(model, s, floor), coarse, bound, generator)
        untipped, tips = untipped_and_tipped(ties, tipped)
        found_untipped, found_tipped = found_untipped + untipped, found_tipped + tips
    assert found_untipped and found_tipped  # both cases seen


def test_an_antecedent_near_tie_is_found_where_the_ranking_or_the_floor_may_tip_and_not_elsewhere():
    terms, inf = 100, float("-inf")
    step = 10 * reordered(terms)  # far beyond the bound of scores of order one
    # Row 1: one antecedent. Row 2: two scored alike (their order may tip). Row 3: three apart, two kept (c = 2).
    coarse = torch.tensor(
        [[inf, inf, inf, inf], [1.0, inf, inf, inf], [1.0, 1.0, inf, inf], [1.0, 1.0 - step, 1.0 - 2 * step, inf]]
    )
    assert antecedent_near_tie(coarse, 2, None, terms).tolist() == [False, False, True, False]
    # The third's second and third best alike: which one is kept may tip.
    coarse[3, 2] = 1.0 - step
    assert antecedent_near_tie(coarse, 2, None, terms).tolist() == [False, False, True, True]
    # A floor at an antecedent's score: whether it is scored may tip; a floor far from every score tips nothing.
    coarse[3, 2] = 1.0 - 2 * step
    assert antecedent_near_tie(coarse, 2, 1.0, terms).tolist() == [False, True, True, True]
    assert antecedent_near_tie(coarse, 2, 0.5, terms).tolist() == [False, False, True, False]
