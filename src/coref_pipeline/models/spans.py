"""Candidate spans, their pruning, distance buckets and span-level attention."""

from __future__ import annotations

import math

import torch
from torch.nn import functional as nn_functional


def candidate_spans(
    sentence_map: torch.Tensor,
    max_span_width: int,
    special: torch.Tensor | None = None,
    word_start: torch.Tensor | None = None,
    word_end: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every (start, end) with width <= ``max_span_width`` inside one sentence, sorted by (start, end).

    Without a ``special`` mask this is the original's rule (``independent.py``): the sentence map alone
    decides, and ``minimize.py``'s gives ``[CLS]`` the id of its segment's first sentence and ``[SEP]`` that
    of the next word's sentence (the next sentence's where the segment ends one), so spans start at
    ``[CLS]``, ``[SEP]`` is a span, and a span may run from ``[SEP]`` over the next ``[CLS]``.
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
    index = valid.reshape(-1).nonzero().squeeze(1)  # [num_candidates]: row-major = sorted by (start, end)
    return starts.reshape(-1).index_select(0, index), ends.reshape(-1).index_select(0, index)


def overlapping_pairs(starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """``[k, k]``: where the earlier span ``j`` overlaps span ``i`` (holds it or is nested in it), for spans in
    (start, end) order (``j < i``: ``start_j <= start_i``, so they overlap where ``end_j >= start_i``); False where
    ``j >= i``. ``starts`` and ``ends`` ``[..., k]`` (several documents' spans side by side): ``[..., k, k]``."""
    earlier = torch.arange(starts.shape[-1], device=starts.device)
    before = earlier.unsqueeze(0) < earlier.unsqueeze(1)  # [k, k]
    return before & (ends.unsqueeze(-2) >= starts.unsqueeze(-1))


def top_k_in_order(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of each row's ``k`` highest scores, highest first, the lower index first among equal ones: ``[rows, k]``
    (``scores`` ``[..., n]``: ``[..., k]``, each row along the last dimension).

    TensorFlow's ``top_k`` comparator (the original's antecedent pruning): which of equal scores are kept
    at the cut is the lower index, as ``-inf`` (masked) antecedents often are; ``torch.topk`` leaves both
    to the kernel. Costs one ``topk`` and a few passes over ``scores``, not a sort of every row.
    """
    if scores.numel() == 0 or k == 0:
        return torch.zeros(*scores.shape[:-1], k, dtype=torch.long, device=scores.device)
    scores = scores.detach().nan_to_num(nan=float("-inf"))  # a NaN ranks last (and rows keep k each)
    threshold = torch.topk(scores, k, dim=-1).values[..., -1:]  # [rows, 1]: the k-th highest
    above = scores > threshold  # [rows, n]
    at = scores == threshold  # [rows, n]
    room = k - above.sum(dim=-1, keepdim=True)  # [rows, 1]: how many equal to it are kept, lowest index first
    kept = above | (at & (at.cumsum(dim=-1) <= room))  # [rows, n], k per row
    # [rows, k], ascending: the k largest of (n - column) where kept (no read of the kept count, as nonzero's)
    descending = torch.arange(scores.shape[-1], 0, -1, device=scores.device)  # [n]
    indices = torch.topk(kept * descending, k, dim=-1).indices
    order = torch.sort(scores.gather(-1, indices), dim=-1, descending=True, stable=True).indices  # [rows, k]
    return indices.gather(-1, order)


def bucket_distance(distances: torch.Tensor) -> torch.Tensor:
    """The original's 10 semi-log buckets: [0, 1, 2, 3, 4, 5-7, 8-15, 16-31, 32-63, 64+]."""
    log_bucket = torch.floor(torch.log(distances.clamp(min=1).float()) / math.log(2)).long() + 3
    buckets = torch.where(distances <= 4, distances, log_bucket)
    return buckets.clamp(0, 9)


def prune_spans(
    scores: torch.Tensor,
    starts: torch.Tensor,
    ends: torch.Tensor,
    k: int,
    kept_spans: list[tuple[int, int]] | None = None,
    crossing: bool = False,
) -> torch.Tensor:
    """Indices of up to ``k`` spans in descending score, skipping any that crosses a kept span (``crossing``:
    keeping it, the ``k`` best whatever they cross, as Xia et al.'s 2020 code's ``topk``).

    Nesting is allowed, crossing (``s1 < s2 <= e1 < e2``) is not. The result is
    sorted by (start, end), as the original ``extract_spans`` kernel returns it.
    ``kept_spans``: a list that receives the kept spans' (start, end), in that order (the host knows them:
    no read back). The spans are read in chunks of the score order, one transfer each (most documents: one).
    """
    order = torch.argsort(scores.detach(), descending=True, stable=True)  # [spans]
    if crossing:
        best = order[:k]  # [k]
        found = sorted(zip(*torch.stack([starts[best], ends[best], best]).tolist(), strict=True))  # one read
        if kept_spans is not None:
            kept_spans.extend((start, end) for start, end, _ in found)
        return torch.tensor([index for _, _, index in found], dtype=torch.long, device=scores.device)
    max_end_from: list[int] = []  # start -> largest end of a kept span starting there
    min_start_to: list[int] = []  # end -> smallest start of a kept span ending there
    kept: list[tuple[int, int, int]] = []  # (start, end, index)
    chunk = max(2 * k, 256)  # spans read from the order at a time: most documents need one chunk
    for first in range(0, order.shape[0], chunk):
        if len(kept) >= k:
            break
        indices = order[first : first + chunk]
        read = [indices, starts[indices], ends[indices]]
        if not first:  # the positions the tables cover, with the first chunk
            read.append(ends.max().reshape(1))
        values = torch.cat(read).tolist()
        if not first:
            num_positions = values.pop() + 1
            max_end_from, min_start_to = [-1] * num_positions, [num_positions] * num_positions
        size = indices.shape[0]
        for index, start, end in zip(values[:size], values[size : 2 * size], values[2 * size :], strict=True):
            if len(kept) >= k:
                break
            # A kept span starting strictly inside this one and ending after it, or ending strictly
            # inside it and starting before it, crosses it (max and min over list slices run in C).
            if end > start and (max(max_end_from[start + 1 : end + 1]) > end or min(min_start_to[start:end]) < start):
                continue
            kept.append((start, end, index))
            if max_end_from[start] < end:
                max_end_from[start] = end
            if min_start_to[end] > start:
                min_start_to[end] = start
    kept.sort()
    if kept_spans is not None:
        kept_spans.extend((start, end) for start, end, _ in kept)
    indices = torch.tensor([index for _, _, index in kept], dtype=torch.long, device=torch.device("cpu"))
    return indices.to(scores.device)


def span_cluster_ids(
    starts: torch.Tensor, ends: torch.Tensor, gold_starts: torch.Tensor, gold_ends: torch.Tensor, ids: torch.Tensor
) -> torch.Tensor:
    """Gold cluster id (``ids``, 1-based) of each span, 0 for spans that are not gold mentions: ``[spans]``.

    Gold spans are distinct (``DocumentTensors`` holds a set). Each span is looked up among the sorted
    gold spans (a binary search), not compared with every gold span: ``[spans, gold]`` tables were the
    larger cost with a whole document's gold mentions and a segment's ~10k candidates.
    """
    if gold_starts.numel() == 0 or starts.numel() == 0:
        return torch.zeros_like(starts)
    stride = torch.maximum(ends.max(), gold_ends.max()) + 1  # a scalar tensor: no read back
    gold_keys, order = torch.sort(gold_starts * stride + gold_ends)  # [gold]
    keys = starts * stride + ends  # [spans]
    found = torch.searchsorted(gold_keys, keys).clamp(max=gold_keys.numel() - 1)  # [spans]
    return torch.where(gold_keys[found] == keys, ids[order][found], torch.zeros_like(ids[:1]))


def gold_mention_loss(
    starts: torch.Tensor,
    ends: torch.Tensor,
    mention_scores: torch.Tensor,
    gold_starts: torch.Tensor,
    gold_ends: torch.Tensor,
) -> torch.Tensor:
    """Summed binary cross-entropy of candidate spans' mention scores against being a gold mention (fp32).

    The auxiliary mention loss of ``mention_loss_coef`` (coref-hoi's, over every candidate; singletons
    are gold mentions). Spans and gold mentions in the same offsets.
    """
    labels = span_cluster_ids(starts, ends, gold_starts, gold_ends, torch.ones_like(gold_starts)).float()  # [spans]
    return nn_functional.binary_cross_entropy_with_logits(mention_scores.float(), labels, reduction="sum")


def spans_cross(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """True if the spans overlap without one containing the other."""
    (s1, e1), (s2, e2) = sorted([a, b])
    return s1 < s2 <= e1 < e2


# A span's attention weights underflow when all of its logits lie far (about 87 nats in float32)
# below the largest logit of the block that scales them; such spans are computed explicitly.
_SMALLEST_ATTENTION_TOTAL = 1e-30


class SpanAttentionTable:
    """``sum_t softmax(logits[s..e])_t * values[t]`` for any span of width at most ``widest + 1``, through a disjoint
    sparse table built once: the span-level attention of every candidate span, read in as many slices as wanted.

    O(n * d * log W) to build, O(d) a span to read, instead of materialising every span's W tokens: each span's
    weighted sum is the sum of two precomputed partial sums of non-negative terms (no subtraction, so float32 is
    exact enough), gathered in one ``embedding_bag``.

    Level ``l < L`` (``2**L > widest``) holds, for each position, its suffix sum to the middle of its aligned block
    of ``2**(l + 1)`` positions (left half) or its prefix sum from that middle (right half); a span whose ends first
    differ in bit ``l`` is the suffix at ``s`` plus the prefix at ``e``. A span across a boundary of the aligned
    blocks of ``2**L`` is the suffix within ``s``'s block plus the prefix within ``e``'s. The weights are scaled by
    the largest logit of the block a pair of sums shares, so they only underflow for spans far below their block's
    largest logit; those are recomputed with :func:`span_attention_explicit`.
    """

    def __init__(self, logits: torch.Tensor, values: torch.Tensor, widest: int) -> None:
        """``logits`` ``[n]``, ``values`` ``[n, d]``; ``widest``: the largest ``end - start`` to be read."""
        num_tokens, dim = values.shape
        self.logits, self.values, self.widest = logits, values, widest
        self.levels = levels = max(1, widest.bit_length())  # 2**levels > widest
        block = 1 << levels
        self.padded = padded = -(-num_tokens // block) * block
        scores = logits.float()
        scores = torch.cat([scores, scores.min().expand(padded - num_tokens)])  # [N]; padding weighs 0 below
        ones = values.new_ones(num_tokens, 1, dtype=torch.float32)
        augmented = torch.cat([torch.cat([values.float(), ones], dim=1), ones.new_zeros(padded - num_tokens, dim + 1)])

        def weighted(size: int, scale: torch.Tensor) -> torch.Tensor:  # [N / size, size, d + 1]
            weights = torch.exp(scores.view(-1, size) - scale.unsqueeze(1)).view(padded, 1)  # [N, 1]
            return (weights * augmented).view(-1, size, dim + 1)

        tables = []
        for level in range(levels):
            half = 1 << level
            halves = weighted(2 * half, scores.view(-1, 2 * half).amax(dim=1)).view(-1, 2, half, dim + 1)
            suffix = halves[:, 0].flip(1).cumsum(1).flip(1)  # to the block's middle
            prefix = halves[:, 1].cumsum(1)  # from the block's middle
            tables.append(torch.stack([suffix, prefix], dim=1).view(padded, dim + 1))
        block_max = scores.view(-1, block).amax(dim=1)  # [N / block]
        pair_max = torch.maximum(block_max[:-1], block_max[1:])  # blocks j and j + 1
        across_suffix = weighted(block, torch.cat([pair_max, block_max[-1:]])).flip(1).cumsum(1).flip(1)
        across_prefix = weighted(block, torch.cat([block_max[:1], pair_max])).cumsum(1)
        tables += [across_suffix.reshape(padded, dim + 1), across_prefix.reshape(padded, dim + 1)]
        tables.append(augmented.new_zeros(1, dim + 1))  # the second row of a one-token span
        self.table = torch.cat(tables)  # [(levels + 2) * N + 1, d + 1]

    def _read(self, starts: torch.Tensor, ends: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The spans' unnormalised sums ``[spans, d]``, their divisors ``[spans, 1]`` and the positions of those whose
        weights underflowed ``[underflowed]``."""
        levels, padded, dim = self.levels, self.padded, self.values.shape[1]
        differ = starts ^ ends
        # [spans]: the highest differing bit, -1 if none (float32 holds token positions exactly up to 2**24;
        # no float64, which some devices lack)
        level = torch.frexp(differ.float()).exponent.long() - 1
        across = level >= levels
        first = torch.where(across, levels * padded + starts, level.clamp(min=0) * padded + starts)
        second = torch.where(across, (levels + 1) * padded + ends, level * padded + ends)
        second = torch.where(differ == 0, (levels + 2) * padded, second)
        pairs = torch.stack([first, second], dim=1)  # [spans, 2]: the two partial sums' rows
        sums = nn_functional.embedding_bag(pairs, self.table, mode="sum")  # [spans, d + 1]
        totals = sums[:, dim:]  # [spans, 1]
        too_small = totals < _SMALLEST_ATTENTION_TOTAL  # [spans, 1]
        # Dividing those by 1 keeps their (discarded) gradient finite.
        divisors = torch.where(too_small, 1.0, totals)  # [spans, 1]
        return sums[:, :dim], divisors, too_small.squeeze(1).nonzero().squeeze(1)

    def _explicit(self, starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
        return span_attention_explicit(self.logits, self.values, starts, ends, self.widest + 1)

    def sums(self, starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
        """The spans' attention-weighted sums, ``[spans, d]`` in the values' dtype."""
        sums, divisors, underflowed = self._read(starts, ends)
        heads = (sums / divisors).to(self.values.dtype)  # [spans, d]
        if underflowed.numel():
            explicit = self._explicit(starts[underflowed], ends[underflowed]).to(self.values.dtype)
            heads = heads.index_put((underflowed,), explicit)
        return heads

    def add_sums_to(self, add_to: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
        """``add_to`` (float32 ``[spans, d]``, not tracked by autograd) plus the spans' sums, in place and returned:
        the same values as ``add_to + sums(...)``, without a ``[spans, d]`` tensor of their own (one division and one
        pass over it fewer)."""
        sums, divisors, underflowed = self._read(starts, ends)
        kept = add_to[underflowed] if underflowed.numel() else None  # [underflowed, d]: their sums come below
        add_to.addcdiv_(sums, divisors)  # a + 1 * b / c: a + b / c, rounded as the division and the sum
        if kept is not None:
            add_to[underflowed] = kept + self._explicit(starts[underflowed], ends[underflowed])
        return add_to


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
