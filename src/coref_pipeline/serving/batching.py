"""Many documents at once: documents grouped by length, the segments of a group read by the encoder together.

The encoder is most of a prediction's arithmetic, and its passes are the same for every document: a group of
documents whose subtokens fit ``max_tokens_in_batch`` goes through it in passes of as many segments as the
budget holds (fastcoref's ``max_tokens_in_batch``), longest documents first so that a group's segments have
about the same width. The baseline's head then reads the group's documents together, each from its own encoder
output (``BaselineCorefModel.forward_group``: its weights read and its operators run once a group, where a short
document's head alone is products of a few rows); the incremental model reads the kept spans of the group's
documents of one segment together (``IncrementalCorefModel.forward_group``) and decides each one's entities on its
own.
A document longer than the budget is a group of its own, predicted as one at a
time: its segments through the encoder in the model's own passes (``segment_batch_size``), and the incremental
model's segment by segment as it always does (no whole-document encoder output is held), so memory stays bounded
and no document is dropped or cut.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

ItemT = TypeVar("ItemT")

# Subtokens read by the encoder in one pass over the segments of several documents (padding included), on an
# accelerator: fastcoref's order of budget (its max_tokens_in_batch), where one pass of many short documents'
# segments fills a device that one document's leave idle.
MAX_TOKENS_IN_BATCH = 8192
# On a CPU: short documents grouped up to this many subtokens a pass. One document of a few sentences is a product
# of a few dozen rows, which a CPU computes far below its pace: 1,000 texts of about 17 words took 0.56-0.60x the
# time of one at a time (`predict` at 512, fp32, the baseline; 0.65x the incremental model; the same bytes), where
# a document of a few hundred subtokens already fills the products and grouping it measured no faster
# (docs/benchmarks.md, "Many documents in one command"). A document over the budget is predicted as one at a time.
CPU_MAX_TOKENS_IN_BATCH = 512


def default_batch_tokens(device_type: str) -> int:
    """The budget prediction takes unless told: ``MAX_TOKENS_IN_BATCH`` on an accelerator (``cuda``, ``mps``),
    ``CPU_MAX_TOKENS_IN_BATCH`` on a CPU."""
    return CPU_MAX_TOKENS_IN_BATCH if device_type == "cpu" else MAX_TOKENS_IN_BATCH


# The baseline's head reads a group's documents side by side, each padded to the most spans any of them kept
# (``BaselineCorefModel.forward_group``: its coarse scores [documents, w, w]). Documents whose subtokens differ by at
# most this factor go through it together, so that the padded cells stay within its square (4x) of the documents'
# own [k, k] cells: a long document beside many short ones in a group (a large budget) is not squared for each.
HEAD_LENGTH_RATIO = 2


def head_runs(token_counts: Sequence[int]) -> list[list[int]]:
    """The positions of a group's ``token_counts`` (longest first, as ``length_groups`` orders them) in runs whose
    longest document has at most ``HEAD_LENGTH_RATIO`` times the subtokens of their shortest: the documents whose
    heads run together."""
    runs: list[list[int]] = []
    for index, count in enumerate(token_counts):
        if runs and token_counts[runs[-1][0]] <= HEAD_LENGTH_RATIO * count:
            runs[-1].append(index)
        else:
            runs.append([index])
    return runs


# How many budgets' worth of documents are read ahead from an iterator and sorted by length before they are
# grouped: longer looks sort better, and hold more documents' inputs (not their encoder outputs) in memory.
POOL_BUDGETS = 4


def length_groups(token_counts: Sequence[int], max_tokens: int) -> list[list[int]]:
    """The positions of ``token_counts`` grouped for one encoder pass each: longest first, each group's subtokens
    within ``max_tokens``; a document over the budget is a group of its own."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens_in_batch must be at least 1, got {max_tokens}")
    order = sorted(range(len(token_counts)), key=lambda index: (-token_counts[index], index))
    groups: list[list[int]] = []
    current: list[int] = []
    used = 0
    for index in order:
        if current and used + token_counts[index] > max_tokens:
            groups.append(current)
            current, used = [], 0
        current.append(index)
        used += token_counts[index]
    if current:
        groups.append(current)
    return groups


def pools(items: Iterable[ItemT], size_of, max_tokens: int) -> Iterator[list[ItemT]]:
    """``items`` in consecutive pools of about ``POOL_BUDGETS`` budgets of subtokens (``size_of(item)``), read
    lazily: an iterator of any length is predicted in bounded memory."""
    pool: list[ItemT] = []
    pooled = 0
    for item in items:
        pool.append(item)
        pooled += size_of(item)
        if pooled >= POOL_BUDGETS * max_tokens:
            yield pool
            pool, pooled = [], 0
    if pool:
        yield pool
