"""SpanBERT's masking (Joshi et al. 2020, section 3.1 and appendix A), and BERT's two for the ablations.

A segment's maskable subtokens (every one but the special tokens) are grouped into words by its subtoken map.
Units are drawn until ``mask_ratio`` of the maskable subtokens are masked:

* ``span``: a span length in complete words from the geometric distribution Geo(p) truncated at
  ``max_span_words`` (p = 0.2, at most 10: mean 3.8 words), then its start, the first subtoken of a word,
  chosen uniformly among the words where that many unmasked words follow in the segment (another length is
  drawn where none does);
* ``whole_word``: one word at a time (BERT's whole-word masking);
* ``subword``: one subtoken at a time (BERT's).

Each unit is replaced as a whole, decided once per unit: 80% ``[MASK]`` in every subtoken, 10% random tokens,
10% unchanged. Spans are sampled until the budget is spent and kept whole (the lengths stay the
distribution's): the last one passes the budget by part of a span (on 384-subtoken segments of English-like
text the masked share is about 15.9%).
Draws come from a ``random.Random`` the caller seeds (the same seed, the same masks: a resumed run masks as the
killed one would have).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from coref_pipeline.config_base import Config
from coref_pipeline.evaluation.metrics import sum_in_order

MASKINGS = ("span", "whole_word", "subword")
IGNORE_INDEX = -100  # a label that is not predicted (torch's cross_entropy default)


def span_length_distribution(p: float, max_words: int) -> list[float]:
    """P(length = 1..max_words) of Geo(p) truncated at ``max_words`` and renormalised (SpanBERT's)."""
    weights = [p * (1 - p) ** (length - 1) for length in range(1, max_words + 1)]
    total = sum_in_order(weights)
    return [weight / total for weight in weights]


@dataclass(frozen=True)
class MaskedSpan:
    """A masked unit: subtokens ``start``..``end`` (inclusive) and how they were replaced."""

    start: int
    end: int
    replacement: str  # "mask", "random" or "same"


@dataclass(frozen=True)
class MaskedSegment:
    """A segment after masking: the encoder's input, the labels and the spans (for the span boundary objective)."""

    input_ids: list[int]
    labels: list[int]  # the original subtoken where masked, IGNORE_INDEX elsewhere
    spans: list[MaskedSpan]


@dataclass(frozen=True)
class MaskingScheme(Config):
    """How a segment is masked; the defaults are SpanBERT's."""

    what: ClassVar[str] = "masking"

    masking: str = "span"
    mask_ratio: float = 0.15
    geometric_p: float = 0.2
    max_span_words: int = 10
    mask_share: float = 0.8  # of the units: [MASK]
    random_share: float = 0.1  # of the units: random tokens (the rest unchanged)

    def __post_init__(self) -> None:
        self.require(self.masking in MASKINGS, "masking", f"one of {list(MASKINGS)}")
        self.require_range("mask_ratio", 0.0, 1.0, low_open=True, high_open=True)
        self.require_range("geometric_p", 0.0, 1.0, low_open=True)
        self.require(self.max_span_words >= 1, "max_span_words", "at least 1")
        self.require_range("mask_share", 0.0, 1.0)
        self.require_range("random_share", 0.0, 1.0 - self.mask_share)

    def mask(
        self,
        input_ids: Sequence[int],
        word_ids: Sequence[int | None],
        mask_id: int,
        random_ids: Sequence[int],
        rng: random.Random,
    ) -> MaskedSegment:
        """Mask one segment. ``word_ids[i]``: the word subtoken i belongs to, None for a special token (never
        masked); subtokens of a word are contiguous. ``random_ids``: the tokens a random replacement draws from
        (the vocabulary without its special tokens)."""
        if len(word_ids) != len(input_ids):
            raise ValueError(f"{len(word_ids)} word ids for {len(input_ids)} subtokens")
        units = self._units(word_ids)  # [(first subtoken, last subtoken)] in order
        maskable = sum(last - first + 1 for first, last in units)
        budget = max(1, round(self.mask_ratio * maskable)) if maskable else 0
        weights = span_length_distribution(self.geometric_p, self.max_span_words)
        free = [True] * len(units)
        masked, spans = 0, []
        while masked < budget:
            length = rng.choices(range(1, self.max_span_words + 1), weights=weights)[0] if self.masking == "span" else 1
            starts = _free_runs_from(free, length)
            if not starts:  # no room for this length: draw another (one unit always fits while one is free)
                if length == 1:
                    break
                continue
            first = starts[rng.randrange(len(starts))]
            last = first + length - 1
            for unit in range(first, last + 1):
                free[unit] = False
            masked += units[last][1] - units[first][0] + 1
            draw = rng.random()
            replacement = (
                "mask" if draw < self.mask_share else "random" if draw < self.mask_share + self.random_share else "same"
            )
            spans.append(MaskedSpan(units[first][0], units[last][1], replacement))
        ids, labels = list(input_ids), [IGNORE_INDEX] * len(input_ids)
        for span in spans:
            for position in range(span.start, span.end + 1):
                labels[position] = input_ids[position]
                if span.replacement == "mask":
                    ids[position] = mask_id
                elif span.replacement == "random":
                    ids[position] = random_ids[rng.randrange(len(random_ids))]
        spans.sort(key=lambda span: span.start)
        return MaskedSegment(ids, labels, spans)

    def _units(self, word_ids: Sequence[int | None]) -> list[tuple[int, int]]:
        """The maskable units: each subtoken (``subword``) or each word's subtokens."""
        units: list[tuple[int, int]] = []
        for position, word in enumerate(word_ids):
            if word is None:
                continue
            joins = (
                self.masking != "subword" and units and word_ids[units[-1][1]] == word and units[-1][1] == position - 1
            )
            if joins:
                units[-1] = (units[-1][0], position)
            else:
                units.append((position, position))
        return units


def _free_runs_from(free: list[bool], length: int) -> list[int]:
    """The units where ``length`` free units in a row start."""
    starts, run = [], 0
    for unit in range(len(free) - 1, -1, -1):  # run: free units in a row from ``unit`` on
        run = run + 1 if free[unit] else 0
        if run >= length:
            starts.append(unit)
    starts.reverse()
    return starts
