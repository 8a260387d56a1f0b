"""Metrics on hand-worked cases, against brute-force definitions, and the scoring API."""

from __future__ import annotations

import itertools
import logging
import math
import random
from pathlib import Path

import numpy as np
import pytest

from coref_pipeline.evaluation import (
    b_cubed,
    blanc,
    ceaf_entity,
    ceaf_mention,
    cluster_overlap,
    deduplicate_mentions,
    evaluate,
    lea,
    mention_identification,
    muc,
    score_documents,
    score_files,
)
from tests.evaluation.conll_helpers import write_conll

# One-word mentions a..i at words 0..8.
a, b, c, d, e, f, g, h, i = ((word, word) for word in range(9))


# --- a tiny case worked by hand -------------------------------------------------------------
# key      k1 = {a, b, c}   k2 = {d, e, g}
# response r1 = {a, b}      r2 = {c, d, e, f}      (g only in key, f only in response)
TINY_KEY = [[a, b, c], [d, e, g]]
TINY_RESPONSE = [[a, b], [c, d, e, f]]


def test_muc_by_hand() -> None:
    # recall: k1 split into {a,b},{c} -> 3-2 = 1 link; k2 into {d,e},{g} -> 1; of 2+2 links.
    # precision: r1 -> 1 of 1; r2 split into {c},{d,e},{f} -> 4-3 = 1 of 3.
    counts = muc(cluster_overlap(TINY_KEY, TINY_RESPONSE))
    assert (counts.recall_num, counts.recall_den, counts.precision_num, counts.precision_den) == (2, 4, 2, 4)
    assert counts.f1 == pytest.approx(0.5)


def test_b_cubed_by_hand() -> None:
    # recall per key mention: a 2/3, b 2/3, c 1/3, d 2/3, e 2/3, g 0 -> 3 / 6.
    # precision per response mention: a 1, b 1, c 1/4, d 2/4, e 2/4, f 0 -> 3.25 / 6.
    counts = b_cubed(cluster_overlap(TINY_KEY, TINY_RESPONSE))
    assert counts.recall_num == pytest.approx(3.0) and counts.recall_den == 6
    assert counts.precision_num == pytest.approx(3.25) and counts.precision_den == 6
    assert counts.f1 == pytest.approx(13 / 25)


def test_ceaf_by_hand() -> None:
    # CEAF-m similarities: k1-r1 2, k1-r2 1, k2-r2 2 -> best k1-r1 + k2-r2 = 4 of 6 mentions each side.
    mention = ceaf_mention(cluster_overlap(TINY_KEY, TINY_RESPONSE))
    assert (mention.recall, mention.precision) == pytest.approx((4 / 6, 4 / 6))
    # CEAF-e: k1-r1 2·2/5, k1-r2 2·1/7, k2-r2 2·2/7 -> best 4/5 + 4/7 = 48/35, over 2 clusters each side.
    entity = ceaf_entity(cluster_overlap(TINY_KEY, TINY_RESPONSE))
    assert entity.recall_num == pytest.approx(48 / 35)
    assert (entity.recall_den, entity.precision_den) == (2, 2)
    assert entity.f1 == pytest.approx(24 / 35)


def test_blanc_by_hand() -> None:
    # coref links: key 3+3 = 6, response 1+6 = 7, common {a-b, d-e} = 2.
    # non-coref links: key 15-6 = 9, response 15-7 = 8 (r1 x r2), common a-d a-e b-d b-e = 4.
    counts = blanc(cluster_overlap(TINY_KEY, TINY_RESPONSE))
    coref, non_coref = counts.coreference, counts.non_coreference
    assert (coref.recall_num, coref.recall_den, coref.precision_den) == (2, 6, 7)
    assert (non_coref.recall_num, non_coref.recall_den, non_coref.precision_den) == (4, 9, 8)
    assert counts.recall == pytest.approx((2 / 6 + 4 / 9) / 2)
    assert counts.precision == pytest.approx((2 / 7 + 4 / 8) / 2)
    assert counts.f1 == pytest.approx((4 / 13 + 8 / 17) / 2)  # mean of the two F1s


def test_lea_by_hand() -> None:
    # recall: k1 (size 3, 3 links) keeps a-b -> 3·1/3; k2 keeps d-e -> 3·1/3; (1+1)/6.
    # precision: r1 (size 2, 1 link) keeps a-b -> 2·1; r2 (size 4, 6 links) keeps d-e -> 4·1/6; (2+2/3)/6.
    counts = lea(cluster_overlap(TINY_KEY, TINY_RESPONSE))
    assert counts.recall == pytest.approx(2 / 6)
    assert counts.precision == pytest.approx((2 + 2 / 3) / 6)
    assert counts.f1 == pytest.approx(8 / 21)


def test_mention_identification_by_hand() -> None:
    counts = mention_identification(cluster_overlap(TINY_KEY, TINY_RESPONSE))
    assert (counts.recall_num, counts.recall_den, counts.precision_num, counts.precision_den) == (5, 6, 5, 6)


def test_lea_paper_example() -> None:
    """Moosavi and Strube 2016, section 4: key {a,b,c} {d,e,f,g}; response {a,b} {c,d} {f,g,h,i}."""
    # recall    = (3 · 1/3 + 4 · 1/6) / (3 + 4)       = 0.238  (a-b of 3 links; f-g of 6 links)
    # precision = (2 · 1 + 2 · 0 + 4 · 1/6) / (2+2+4) = 0.333
    # F1 = 2 · 0.238 · 0.333 / (0.238 + 0.333)         = 0.278
    counts = lea(cluster_overlap([[a, b, c], [d, e, f, g]], [[a, b], [c, d], [f, g, h, i]]))
    assert counts.recall == pytest.approx((1 + 4 / 6) / 7)
    assert counts.precision == pytest.approx((2 + 4 / 6) / 8)
    assert round(counts.f1, 2) == 0.28


def test_lea_singletons() -> None:
    # key {a} {b,c}; response {a} {b} {c}:
    # recall: {a} is a singleton in the response too -> 1·1; {b,c} loses its link -> 0; 1/3.
    # precision: {a} -> 1; {b}, {c} are not key singletons -> 0; 1/3.
    counts = lea(cluster_overlap([[a], [b, c]], [[a], [b], [c]]))
    assert (counts.recall, counts.precision) == pytest.approx((1 / 3, 1 / 3))
    # a key singleton inside a bigger response cluster is not resolved.
    counts = lea(cluster_overlap([[a], [b, c]], [[a, b, c]]))
    assert counts.recall == pytest.approx(2 / 3)  # (0 + 2·1) / 3
    assert counts.precision == pytest.approx(3 * (1 / 3) / 3)  # one of three links right


def test_identical_clusterings_score_one() -> None:
    overlap = cluster_overlap(TINY_KEY, TINY_KEY)
    for metric in (muc, b_cubed, ceaf_mention, ceaf_entity, blanc, lea):
        result = metric(overlap)
        assert (result.recall, result.precision, result.f1) == pytest.approx((1, 1, 1)), metric.__name__


def test_empty_response_scores_zero() -> None:
    overlap = cluster_overlap(TINY_KEY, [])
    for metric in (muc, b_cubed, ceaf_mention, ceaf_entity, blanc, lea):
        assert metric(overlap).f1 == 0.0, metric.__name__


# --- against brute-force definitions on random clusterings -----------------------------------


def _random_clustering(rng: random.Random, spans: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    chosen = [span for span in spans if rng.random() < 0.8]
    labels = [rng.randrange(max(1, len(chosen) // 2)) for _ in chosen]
    clusters: dict[int, list] = {}
    for span, label in zip(chosen, labels, strict=True):
        clusters.setdefault(label, []).append(span)
    return list(clusters.values())


def _brute_ceaf(key, response, similarity) -> float:
    """Best alignment by trying every injection of the smaller side into the larger."""
    small, large, flip = (key, response, False) if len(key) <= len(response) else (response, key, True)
    best = 0.0
    for chosen in itertools.permutations(range(len(large)), len(small)):
        total = 0.0
        for s_index, l_index in enumerate(chosen):
            k, r = (large[l_index], small[s_index]) if flip else (small[s_index], large[l_index])
            total += similarity(set(k), set(r))
        best = max(best, total)
    return best


def _brute_links(clusters) -> tuple[set, set]:
    coref, non_coref = set(), set()
    mentions = [(m, index) for index, cluster in enumerate(clusters) for m in cluster]
    for (m1, c1), (m2, c2) in itertools.combinations(mentions, 2):
        (coref if c1 == c2 else non_coref).add(frozenset((m1, m2)))
    return coref, non_coref


def _brute_muc_recall_num(key, response) -> int:
    cluster_of = {m: index for index, cluster in enumerate(response) for m in cluster}
    total = 0
    for cluster in key:
        parts = {cluster_of.get(m, ("alone", m)) for m in cluster}
        total += len(cluster) - len(parts)
    return total


@pytest.mark.parametrize("seed", range(25))
def test_metrics_match_brute_force_definitions(seed: int) -> None:
    rng = random.Random(seed)
    spans = [(start, start + rng.randrange(2)) for start in range(0, 30, 3)]
    key = _random_clustering(rng, spans)
    response = _random_clustering(rng, spans + [(100, 100), (101, 102)])
    response = [cluster for cluster in response if cluster]
    if len(key) > 7 or len(response) > 7:  # keep the permutations small
        key, response = key[:7], response[:7]
    overlap = cluster_overlap(key, response)

    phi4 = _brute_ceaf(key, response, lambda k, r: 2 * len(k & r) / (len(k) + len(r)))
    assert ceaf_entity(overlap).recall_num == pytest.approx(phi4)
    assert ceaf_mention(overlap).recall_num == pytest.approx(_brute_ceaf(key, response, lambda k, r: len(k & r)))

    key_coref, key_non = _brute_links(key)
    response_coref, response_non = _brute_links(response)
    counts = blanc(overlap)
    assert counts.coreference.recall_num == len(key_coref & response_coref)
    assert (counts.coreference.recall_den, counts.coreference.precision_den) == (len(key_coref), len(response_coref))
    assert counts.non_coreference.recall_num == len(key_non & response_non)
    assert (counts.non_coreference.recall_den, counts.non_coreference.precision_den) == (
        len(key_non),
        len(response_non),
    )

    assert muc(overlap).recall_num == _brute_muc_recall_num(key, response)
    assert muc(overlap).precision_num == _brute_muc_recall_num(response, key)

    key_of = {m: set(cluster) for cluster in key for m in cluster}
    response_of = {m: set(cluster) for cluster in response for m in cluster}
    recall_num = sum(len(key_of[m] & response_of.get(m, set())) / len(key_of[m]) for m in key_of)
    precision_num = sum(len(response_of[m] & key_of.get(m, set())) / len(response_of[m]) for m in response_of)
    assert b_cubed(overlap).recall_num == pytest.approx(recall_num)
    assert b_cubed(overlap).precision_num == pytest.approx(precision_num)


def test_ceaf_with_many_disjoint_pairs_and_a_tangle() -> None:
    """Isolated cluster pairs are aligned directly; the tangled ones by the assignment."""
    key = [[(100 + n, 100 + n)] for n in range(50)] + [[a, b], [c, d]]
    response = [[(100 + n, 100 + n)] for n in range(50)] + [[a, c], [b, d]]
    # 50 exact singletons (1 each) + best of the 2x2 tangle: each pair shares 1 of 2+2 -> 0.5 + 0.5.
    assert ceaf_entity(cluster_overlap(key, response)).recall_num == pytest.approx(51.0)


def test_cluster_overlap_rejects_repeats_and_empty_clusters() -> None:
    with pytest.raises(ValueError, match="response clusters repeat"):
        cluster_overlap([[a]], [[a], [a]])
    with pytest.raises(ValueError, match="key clusters repeat"):
        cluster_overlap([[a, a]], [[a]])
    with pytest.raises(ValueError, match="empty"):
        cluster_overlap([[a], []], [[a]])


def test_evaluate_rejects_unknown_metric() -> None:
    with pytest.raises(ValueError, match="unknown metric 'f1'"):
        evaluate("f1", [[a]], [[a]])


# --- scoring: pooling, singletons, duplicates, missing documents ------------------------------


def test_corpus_scores_pool_counts_not_document_averages() -> None:
    # doc1: key {a,b}, response {a,b}: MUC 1/1 both ways.
    # doc2: key {a,b,c,d,e} (4 links), response {a,b} {c,d} {e}: 2 links kept; R 2/4, P 2/2.
    # pooled recall (1+2)/(1+4) = 0.6, whereas the mean of the document recalls is 0.75.
    key = {"doc1": [[a, b]], "doc2": [[a, b, c, d, e]]}
    response = {"doc1": [[a, b]], "doc2": [[a, b], [c, d], [e]]}
    scores = score_documents(key, response, ["muc"])
    assert scores["muc"].recall == pytest.approx(0.6)
    assert scores["muc"].precision == pytest.approx(1.0)
    assert scores["muc"].f1 == pytest.approx(0.75)
    per_document = [document["muc"].recall for document in scores.documents]
    assert per_document == pytest.approx([1.0, 0.5])
    assert np.mean(per_document) == pytest.approx(0.75) != pytest.approx(scores["muc"].recall)
    assert scores.to_dict()["metrics"]["muc"]["recall_num"] == 3
    assert scores.to_dict()["metrics"]["muc"]["recall_den"] == 5


def test_blanc_pools_counts_before_its_special_cases() -> None:
    # doc1: key all singletons (no coreference links), response puts a and b together.
    # doc2: key {a,b,c}, response {a,b} {c}.
    # Pooled coref links: key 0+3, response 1+1, common 0+1; non-coref: key 1+0, response 0+2, common 0+0.
    key = {"doc1": [[a], [b]], "doc2": [[a, b, c]]}
    response = {"doc1": [[a, b]], "doc2": [[a, b], [c]]}
    pooled = score_documents(key, response, ["blanc"])["blanc"]
    assert (pooled.coreference.recall_num, pooled.coreference.recall_den) == (1, 3)
    assert (pooled.coreference.precision_num, pooled.coreference.precision_den) == (1, 2)
    assert (pooled.non_coreference.recall_num, pooled.non_coreference.recall_den) == (0, 1)
    assert pooled.non_coreference.precision_den == 2
    assert pooled.recall == pytest.approx((1 / 3 + 0) / 2)
    assert pooled.precision == pytest.approx((1 / 2 + 0) / 2)
    assert pooled.f1 == pytest.approx((0.4 + 0) / 2)


def test_blanc_special_cases() -> None:
    # key without coreference links: only non-coreference links count.
    only_non = blanc(cluster_overlap([[a], [b], [c]], [[a, b], [c]]))
    assert (only_non.recall, only_non.precision) == pytest.approx((2 / 3, 2 / 2))
    # key without non-coreference links: only coreference links count.
    only_coref = blanc(cluster_overlap([[a, b, c]], [[a, b], [c]]))
    assert (only_coref.recall, only_coref.precision) == pytest.approx((1 / 3, 1 / 1))
    # a key of one mention has no links at all: 0.
    none = blanc(cluster_overlap([[a]], [[a]]))
    assert (none.recall, none.precision, none.f1) == (0.0, 0.0, 0.0)


def test_remove_singletons() -> None:
    # key {a} {b,c} {d,e}; response {a} {b,c} {d} {e} ({f,f} becomes {f} after dropping the repeat).
    key = {"doc": [[a], [b, c], [d, e]]}
    response = {"doc": [[a], [b, c], [d], [e], [f, f]]}
    kept = score_documents(key, response, ["muc", "bcub"])
    # B³ with singletons: recall a 1, b 1, c 1, d 1/2, e 1/2 = 4/5; precision all 1 but f 0 = 5/6.
    assert (kept["bcub"].recall, kept["bcub"].precision) == pytest.approx((4 / 5, 5 / 6))
    removed = score_documents(key, response, ["muc", "bcub"], remove_singletons=True)
    # Without singletons: key {b,c} {d,e}, response {b,c}: B³ recall (1+1+0+0)/4, precision 2/2.
    assert (removed["bcub"].recall, removed["bcub"].precision) == pytest.approx((0.5, 1.0))
    assert (removed["muc"].recall, removed["muc"].precision) == pytest.approx((0.5, 1.0))
    assert removed.mentions.recall_den == 4 and removed.mentions.precision_den == 2


def test_repeated_response_mentions_keep_first_occurrence(caplog: pytest.LogCaptureFixture) -> None:
    key = {"docA": [[a, b], [c, d]]}
    # a repeated in its own cluster, c repeated in a later cluster: both dropped.
    response = {"docA": [[a, b, a], [c, d], [e, c]]}
    with caplog.at_level(logging.WARNING, logger="coref_pipeline.evaluation"):
        scores = score_documents(key, response, ["muc", "bcub"])
    messages = [record.getMessage() for record in caplog.records]
    assert any("'docA'" in message and "(0, 0)" in message and "same" in message for message in messages)
    assert any("'docA'" in message and "(2, 2)" in message and "earlier" in message for message in messages)
    # Scored as {a,b} {c,d} {e}: MUC 2/2 both ways; B³ precision (1+1+1+1+0)/5.
    assert (scores["muc"].recall, scores["muc"].precision) == pytest.approx((1.0, 1.0))
    assert scores["bcub"].precision == pytest.approx(4 / 5)


def test_repeated_key_mentions_are_dropped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="coref_pipeline.evaluation"):
        cleaned = deduplicate_mentions([[a, b], [b, c], [[3, 3]]], "docK", "key")
    assert cleaned == [[a, b], [c], [d]]  # spans given as lists become tuples
    assert any("'docK' (key)" in record.getMessage() and "(1, 1)" in record.getMessage() for record in caplog.records)


def test_more_than_ten_repeats_warns_like_the_reference_refusal(caplog: pytest.LogCaptureFixture) -> None:
    response = {"doc": [[a, b] + [c] * 12]}
    with caplog.at_level(logging.WARNING, logger="coref_pipeline.evaluation"):
        scores = score_documents({"doc": [[a, b, c]]}, response, ["muc"])
    assert any("refuses" in record.getMessage() and "11" in record.getMessage() for record in caplog.records)
    assert scores["muc"].recall == pytest.approx(1.0)


def test_missing_documents_are_named() -> None:
    with pytest.raises(ValueError, match=r"of the key missing from the response: 'doc2'"):
        score_documents({"doc1": [[a]], "doc2": [[a]]}, {"doc1": [[a]]})
    with pytest.raises(ValueError, match=r"of the response missing from the key: 'extra'"):
        score_documents({"doc1": [[a]]}, {"doc1": [[a]], "extra": [[a]]})


def test_missing_document_error_names_the_files(tmp_path: Path) -> None:
    key_path = write_conll(tmp_path / "key.conll", {"one": (4, [[a, b]]), "two": (4, [[a, b]])})
    response_path = write_conll(tmp_path / "response.conll", {"one": (4, [[a, b]])})
    with pytest.raises(ValueError) as error:
        score_files(key_path, response_path)
    message = str(error.value)
    assert "'two_0'" in message and str(key_path) in message and str(response_path) in message


def test_unknown_metric_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown metric"):
        score_documents({"d": [[a]]}, {"d": [[a]]}, ["muc", "bleu"])


def test_conll_f1_is_the_mean_of_muc_bcub_ceafe() -> None:
    scores = score_documents({"d": TINY_KEY}, {"d": TINY_RESPONSE}, ["muc", "bcub", "ceafe", "lea"])
    # MUC 1/2, B³ 13/25, CEAF-e 24/35 (worked above).
    assert scores.conll_f1 == pytest.approx((0.5 + 13 / 25 + 24 / 35) / 3)
    assert score_documents({"d": TINY_KEY}, {"d": TINY_RESPONSE}, ["muc", "bcub"]).conll_f1 is None


def test_files_are_scored_like_clusters(tmp_path: Path) -> None:
    key_path = write_conll(tmp_path / "key.conll", {"d": (10, [[(0, 1), (3, 3)], [(5, 7), (8, 8)]])})
    response_path = write_conll(tmp_path / "response.conll", {"d": (10, [[(0, 1), (3, 3), (5, 7)], [(9, 9)]])})
    scores = score_files(key_path, response_path, ["muc"])
    # key links 1+1; response {0-1,3,5-7} keeps one link of its 2; {9} twinless singleton.
    assert (scores["muc"].recall, scores["muc"].precision) == pytest.approx((1 / 2, 1 / 2))
    assert [document.doc_key for document in scores.documents] == ["d_0"]


def test_clusters_are_read_in_reference_scorer_order() -> None:
    """The reference numbers an entity at its first bracket (per cell: one-word, openings, closings)."""
    from coref_pipeline.formats.conll import parse_conll_lines

    cells = ["-", "-", "-", "(1(3", "-", "-", "3)1)", "-", "-", "(1)", "(5)|(4", "4)", "-", "(3)"]
    lines = [
        "#begin document (d); part 000",
        *[f"d 0 {i} w{i} {cell}" for i, cell in enumerate(cells)],
        "",
        "#end document",
    ]
    [document] = parse_conll_lines(
        lines, min_columns=1, strict_mentions=False, bracket_order="reference", allow_cross_sentence=True
    )
    # Cluster 3 closes first, but cluster 1 opened first; at word 10 the one-word (5) is read before (4.
    assert document.clusters == [[(3, 6), (9, 9)], [(3, 6), (13, 13)], [(10, 10)], [(10, 11)]]


def test_sum_in_order_adds_left_to_right_on_every_python():
    from coref_pipeline.evaluation.metrics import sum_in_order

    # 1e16 + 1.0 rounds back to 1e16 (its neighbours are 2 apart), so added in order the 1.0 is lost; a compensated
    # sum (math.fsum, and sum() of floats since Python 3.12) keeps it
    assert sum_in_order([1e16, 1.0, -1e16]) == 0.0
    assert math.fsum([1e16, 1.0, -1e16]) == 1.0
    assert sum_in_order(iter([0.5, 0.25])) == 0.75
    assert sum_in_order([]) == 0.0


def test_conll_f1_is_the_same_bits_on_every_python():
    from types import SimpleNamespace

    from coref_pipeline.evaluation.scoring import conll_f1

    # MUC, B³ and CEAF-e F1 of a model on LitBank dev whose mean, added in order and compensated, differ in the last bit
    muc, bcub, ceafe = 0.7923976608187135, 0.48865603413489295, 0.3181300037503222
    assert ((muc + bcub) + ceafe) / 3 != math.fsum([muc, bcub, ceafe]) / 3
    metrics = {name: SimpleNamespace(f1=f1) for name, f1 in (("muc", muc), ("bcub", bcub), ("ceafe", ceafe))}
    assert conll_f1(metrics) == ((muc + bcub) + ceafe) / 3
