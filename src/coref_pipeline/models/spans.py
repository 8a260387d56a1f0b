"""Candidate spans, their pruning, distance buckets and span-level attention."""

from __future__ import annotations

import math

import torch


def candidate_spans(
    sentence_map: torch.Tensor,
    max_span_width: int,
    special: torch.Tensor | None = None,
    word_start: torch.Tensor | None = None,
    word_end: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every (start, end) with width <= ``max_span_width`` inside one sentence, sorted by (start, end).

    With a ``special`` mask ([CLS]/[SEP]) no span contains a special token. With
    ``word_start``/``word_end`` masks a span must also start on a word's first
    subtoken and end on a word's last.
    """
    num_tokens, device = sentence_map.shape[0], sentence_map.device
    starts = torch.arange(num_tokens, device=device).unsqueeze(1).expand(num_tokens, max_span_width)  # [n, W]
    ends = starts + torch.arange(max_span_width, device=device).unsqueeze(0)  # [n, W]
    valid = ends < num_tokens  # [n, W]
    clipped_ends = ends.clamp(max=num_tokens - 1)
    valid &= sentence_map[starts] == sentence_map[clipped_ends]
    if special is not None:
        specials_before = torch.cat([special.new_zeros(1, dtype=torch.long), torch.cumsum(special.long(), dim=0)])
        valid &= specials_before[clipped_ends + 1] == specials_before[starts]  # none in [start, end]
    if word_start is not None and word_end is not None:
        valid &= word_start[starts] & word_end[clipped_ends]
    return starts[valid], ends[valid]  # [num_candidates] each, row-major = sorted by (start, end)


def bucket_distance(distances: torch.Tensor) -> torch.Tensor:
    """The original's 10 semi-log buckets: [0, 1, 2, 3, 4, 5-7, 8-15, 16-31, 32-63, 64+]."""
    log_bucket = torch.floor(torch.log(distances.clamp(min=1).float()) / math.log(2)).long() + 3
    buckets = torch.where(distances <= 4, distances, log_bucket)
    return buckets.clamp(0, 9)


def prune_spans(scores: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of up to ``k`` spans in descending score, skipping any that crosses a kept span.

    Nesting is allowed, crossing (``s1 < s2 <= e1 < e2``) is not. The result is
    sorted by (start, end), as the original ``extract_spans`` kernel returns it.
    """
    order = torch.argsort(scores.detach(), descending=True, stable=True).tolist()
    starts_list, ends_list = starts.tolist(), ends.tolist()
    max_end_from: dict[int, int] = {}  # start -> largest end of a kept span starting there
    min_start_to: dict[int, int] = {}  # end -> smallest start of a kept span ending there
    kept: list[int] = []
    for index in order:
        if len(kept) >= k:
            break
        start, end = starts_list[index], ends_list[index]
        crosses = False
        for position in range(start, end + 1):
            # A kept span starting strictly inside this one and ending after it, or
            # ending strictly inside it and starting before it, crosses it.
            if position > start and max_end_from.get(position, -1) > end:
                crosses = True
                break
            if position < end and min_start_to.get(position, end + 1) < start:
                crosses = True
                break
        if crosses:
            continue
        kept.append(index)
        if max_end_from.get(start, -1) < end:
            max_end_from[start] = end
        if min_start_to.get(end, end + 1) > start:
            min_start_to[end] = start
    kept.sort(key=lambda i: (starts_list[i], ends_list[i]))
    return torch.tensor(kept, dtype=torch.long, device=scores.device)


def spans_cross(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """True if the spans overlap without one containing the other."""
    (s1, e1), (s2, e2) = sorted([a, b])
    return s1 < s2 <= e1 < e2


def span_attention_sums(
    logits: torch.Tensor, values: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor
) -> torch.Tensor:
    """``sum_t softmax(logits[s..e])_t * values[t]`` for every span, through prefix sums.

    O(n * d + spans * d) instead of materialising every span's tokens. The prefix
    sums are float64 so that differences of long prefixes stay exact enough.
    """
    weights = torch.exp((logits - logits.max()).double())  # [n]
    weighted = torch.cumsum(weights.unsqueeze(1) * values.double(), dim=0)  # [n, d]
    weighted = torch.cat([weighted.new_zeros(1, weighted.shape[1]), weighted])  # [n + 1, d]
    normaliser = torch.cat([weights.new_zeros(1), torch.cumsum(weights, dim=0)])  # [n + 1]
    sums = (weighted.index_select(0, ends + 1) - weighted.index_select(0, starts)).to(values.dtype)  # [spans, d]
    totals = (normaliser[ends + 1] - normaliser[starts]).unsqueeze(1).to(values.dtype)  # [spans, 1]
    return sums / totals


def span_attention_explicit(
    logits: torch.Tensor, values: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor, max_width: int
) -> torch.Tensor:
    """The same attention-weighted sums, gathering each span's tokens (for few spans)."""
    offsets = torch.arange(max_width, device=starts.device)  # [W]
    positions = starts.unsqueeze(1) + offsets  # [spans, W]
    inside = positions <= ends.unsqueeze(1)  # [spans, W]
    positions = positions.clamp(max=values.shape[0] - 1)
    span_logits = logits[positions].masked_fill(~inside, float("-inf"))  # [spans, W]
    attention = torch.softmax(span_logits, dim=1)  # [spans, W]
    return torch.einsum("sw,swd->sd", attention, values[positions])  # [spans, d]
