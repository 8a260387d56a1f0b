"""Subtoken predictions -> word-level clusters."""

from __future__ import annotations

from coref_pipeline.evaluation import subtoken_to_word_clusters

# [CLS] The big dog ##s bark [SEP] [CLS] they run [SEP]
# words: 0 The, 1 big, 2 dogs, 3 bark, 4 they, 5 run
SUBTOKEN_MAP = [0, 0, 1, 2, 2, 3, 3, 3, 4, 5, 5]


def test_spans_map_through_the_subtoken_map() -> None:
    clusters = [[[1, 4], [8, 8]], [[5, 5]]]
    # "The big dog ##s" -> words 0-2, "they" -> 4; "bark" -> 3.
    assert subtoken_to_word_clusters(clusters, SUBTOKEN_MAP) == [[(0, 2), (4, 4)], [(3, 3)]]


def test_repeated_word_spans_keep_the_first_and_empty_clusters_go() -> None:
    # [3, 4] and [4, 4] are both the word "dogs" (2, 2); [1, 4] and [0, 4] both words 0-2.
    clusters = [[[3, 4], [8, 8], [4, 4]], [[4, 4], [3, 3]], [[1, 4]], [[0, 4], [9, 10]]]
    assert subtoken_to_word_clusters(clusters, SUBTOKEN_MAP) == [[(2, 2), (4, 4)], [(0, 2)], [(5, 5)]]


def test_empty_input() -> None:
    assert subtoken_to_word_clusters([], SUBTOKEN_MAP) == []
