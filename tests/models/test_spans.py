"""Candidate spans, pruning and span attention."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from coref_pipeline.models.spans import (
    SpanAttentionTable,
    bucket_distance,
    candidate_spans,
    prune_spans,
    span_attention_explicit,
    span_cluster_ids,
    spans_cross,
)


def test_candidate_spans_stay_in_sentences_and_are_sorted():
    sentence_map = torch.tensor([0, 0, 0, 1, 1, 2])
    starts, ends = candidate_spans(sentence_map, max_span_width=2)
    assert list(zip(starts.tolist(), ends.tolist(), strict=True)) == [
        (0, 0), (0, 1), (1, 1), (1, 2), (2, 2), (3, 3), (3, 4), (4, 4), (5, 5)
    ]  # fmt: skip


def test_word_boundary_spans():
    sentence_map = torch.zeros(6, dtype=torch.long)
    word_start = torch.tensor([False, True, False, True, True, False])  # [CLS] a ##b c d [SEP]
    word_end = torch.tensor([False, False, True, True, True, False])
    starts, ends = candidate_spans(sentence_map, 4, word_start=word_start, word_end=word_end)
    assert list(zip(starts.tolist(), ends.tolist(), strict=True)) == [(1, 2), (1, 3), (1, 4), (3, 3), (3, 4), (4, 4)]


def test_no_span_contains_a_special_token_even_where_the_sentence_runs_on():
    # [CLS] a b [SEP] [CLS] c [SEP]: minimize.py gives [SEP], the next [CLS] and "c" one sentence id.
    sentence_map = torch.tensor([0, 0, 0, 1, 1, 1, 2])
    special = torch.tensor([True, False, False, True, True, False, True])
    starts, ends = candidate_spans(sentence_map, 3, special)
    assert list(zip(starts.tolist(), ends.tolist(), strict=True)) == [(1, 1), (1, 2), (2, 2), (5, 5)]


def test_bucket_distance_matches_the_original_buckets():
    distances = torch.tensor([0, 1, 2, 3, 4, 5, 7, 8, 15, 16, 31, 32, 63, 64, 1000])
    assert bucket_distance(distances).tolist() == [0, 1, 2, 3, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9]


def brute_force_prune(scores, starts, ends, k):
    """Greedy by score over a plain list, checking every kept span for crossing."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    kept = []
    for index in order:
        if len(kept) == k:
            break
        span = (starts[index], ends[index])
        if all(not spans_cross(span, (starts[j], ends[j])) for j in kept):
            kept.append(index)
    return sorted(kept, key=lambda i: (starts[i], ends[i]))


@pytest.mark.parametrize("seed", range(20))
def test_pruning_matches_brute_force(seed):
    rng = random.Random(seed)
    n = rng.randint(5, 40)
    sentence_map = torch.tensor(sorted(rng.randrange(4) for _ in range(n)))
    starts, ends = candidate_spans(sentence_map, max_span_width=rng.randint(1, 8))
    scores = torch.tensor([rng.choice([rng.random(), 0.5]) for _ in range(len(starts))])  # ties included
    k = rng.randint(1, len(starts))
    kept = prune_spans(scores, starts, ends, k).tolist()
    assert kept == brute_force_prune(scores.tolist(), starts.tolist(), ends.tolist(), k)
    kept_spans = [(starts[i].item(), ends[i].item()) for i in kept]
    assert not any(spans_cross(a, b) for a, b in itertools.combinations(kept_spans, 2))


@pytest.mark.parametrize("seed", range(3))
def test_pruning_reads_the_score_order_in_chunks_as_one(seed):
    # About 900 candidates and k = 300: the order is read 600 spans at a time, and most of the
    # first 600 cross a kept span, so the loop goes on to the next chunk.
    rng = random.Random(seed)
    starts, ends = candidate_spans(torch.zeros(120, dtype=torch.long), max_span_width=8)
    scores = torch.tensor([rng.random() for _ in range(len(starts))])
    kept = prune_spans(scores, starts, ends, 300).tolist()
    assert kept == brute_force_prune(scores.tolist(), starts.tolist(), ends.tolist(), 300)
    assert 0 < len(kept) < 300  # every span crosses or nests: fewer than k can be kept


def test_pruning_allows_nesting_and_rejects_crossing():
    starts, ends = torch.tensor([0, 1, 2, 0]), torch.tensor([2, 3, 2, 3])
    scores = torch.tensor([3.0, 2.0, 1.0, 0.5])
    # (1, 3) crosses (0, 2); (2, 2) nests in it; (0, 3) contains both.
    assert prune_spans(scores, starts, ends, 4).tolist() == [0, 3, 2]


@pytest.mark.parametrize("seed", range(3))
def test_prefix_sum_attention_equals_the_explicit_one(seed):
    torch.manual_seed(seed)
    n, d, width = 50, 7, 6
    logits, values = torch.randn(n) * 3, torch.randn(n, d)
    starts, ends = candidate_spans(torch.zeros(n, dtype=torch.long), width)
    fast = SpanAttentionTable(logits, values, int((ends - starts).max())).sums(starts, ends)
    slow = span_attention_explicit(logits, values, starts, ends, width)
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("logit_scale", [30.0, 300.0])
def test_attention_sums_stay_exact_and_finite_for_far_apart_logits(logit_scale):
    # Logits hundreds of nats apart: a span far below its block's largest logit underflows in the
    # table and is computed explicitly; values and gradients equal the explicit form's.
    torch.manual_seed(1)
    n, d, width = 200, 6, 30
    logits = (torch.randn(n) * logit_scale).requires_grad_()
    values = torch.randn(n, d, requires_grad=True)
    starts, ends = candidate_spans(torch.randint(0, 4, (n,)).sort().values, width)
    upstream = torch.randn(starts.numel(), d)
    fast = SpanAttentionTable(logits, values, int((ends - starts).max())).sums(starts, ends)
    slow = span_attention_explicit(logits, values, starts, ends, width)
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-5)
    fast_grads = torch.autograd.grad((fast * upstream).sum(), [logits, values])
    slow_grads = torch.autograd.grad((slow * upstream).sum(), [logits, values])
    for fast_grad, slow_grad in zip(fast_grads, slow_grads, strict=True):
        assert torch.isfinite(fast_grad).all()
        torch.testing.assert_close(fast_grad, slow_grad, rtol=1e-4, atol=1e-4)


def test_attention_sums_of_one_token_spans_and_spans_across_blocks():
    # Widths 1 to 9 (blocks of 16) over 40 tokens: one-token spans, spans inside a block and across.
    torch.manual_seed(2)
    logits, values = torch.randn(40), torch.randn(40, 3)
    starts, ends = candidate_spans(torch.zeros(40, dtype=torch.long), 9)
    fast = SpanAttentionTable(logits, values, int((ends - starts).max())).sums(starts, ends)
    torch.testing.assert_close(fast, span_attention_explicit(logits, values, starts, ends, 9), rtol=1e-5, atol=1e-5)
    single = starts == ends
    torch.testing.assert_close(fast[single], values[starts[single]])
    assert SpanAttentionTable(logits, values, int((ends - starts).max())).sums(starts[:0], ends[:0]).shape == (0, 3)


@pytest.mark.parametrize("seed", range(4))
def test_span_cluster_ids_are_the_gold_cluster_of_each_span_or_0(seed):
    """Against the definition: every (span, gold span) pair compared (gold spans distinct, as in a document)."""
    rng = random.Random(seed)
    gold = rng.sample([(s, s + w) for s in range(60) for w in range(4)], 25)
    cluster = [rng.randrange(1, 8) for _ in gold]
    spans = [(s, s + w) for s in range(70) for w in range(5)]
    rng.shuffle(spans)
    starts, ends = (torch.tensor(column) for column in zip(*spans, strict=True))
    gold_starts, gold_ends = (torch.tensor(column) for column in zip(*gold, strict=True))
    found = span_cluster_ids(starts, ends, gold_starts, gold_ends, torch.tensor(cluster))
    of_gold = dict(zip(gold, cluster, strict=True))
    assert found.tolist() == [of_gold.get(span, 0) for span in spans]
    assert sum(value > 0 for value in found.tolist()) == len(gold)
    empty = torch.zeros(0, dtype=torch.long)
    assert span_cluster_ids(starts, ends, empty, empty, empty).tolist() == [0] * len(spans)
    assert span_cluster_ids(empty, empty, gold_starts, gold_ends, torch.tensor(cluster)).tolist() == []


def test_pruning_with_crossing_keeps_the_k_best_sorted_crossing_or_not():
    """Xia et al.'s 2020 code keeps a segment's k best spans by score (``topk``), crossing ones too."""
    starts, ends = torch.tensor([0, 1, 2, 0]), torch.tensor([1, 2, 3, 0])
    scores = torch.tensor([3.0, 2.5, 1.0, 0.5])
    kept_spans: list = []
    kept = prune_spans(scores, starts, ends, 3, kept_spans, crossing=True)
    assert kept.tolist() == [0, 1, 2] and kept_spans == [(0, 1), (1, 2), (2, 3)]  # (1, 2) crosses (0, 1)
    assert prune_spans(scores, starts, ends, 3).tolist() == [3, 0, 2]  # the original's rule skips it


@pytest.mark.parametrize("logit_scale", [1.0, 300.0])
def test_attention_sums_added_in_place_are_the_sum_of_the_two_exactly(logit_scale):
    # Prediction adds the sums onto the mention FFNN's first layer in place (one division less): the same bits as
    # adding the returned sums, also where spans underflow and are computed explicitly (logits 300 nats apart).
    torch.manual_seed(3)
    n, d, width = 120, 5, 12
    logits, values = torch.randn(n) * logit_scale, torch.randn(n, d)
    starts, ends = candidate_spans(torch.randint(0, 3, (n,)).sort().values, width)
    base = torch.randn(starts.numel(), d)
    table = SpanAttentionTable(logits, values, int((ends - starts).max()))
    expected = base + table.sums(starts, ends)
    target = base.clone()
    returned = table.add_sums_to(target, starts, ends)
    assert returned is target and torch.equal(target, expected)
