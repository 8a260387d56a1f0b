"""Subword segmentation into Joshi et al.'s jsonlines (minimize.py semantics)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from coref_pipeline.formats.conll import normalize_word, parse_conll_lines, read_conll
from coref_pipeline.formats.segmentation import (
    MAX_SENTENCE_SEGMENT_LEN,
    SegmentationError,
    SegmentLength,
    SpecialTokens,
    TokenizedDocument,
    check_document,
    flatten,
    segment_document,
    split_into_segments,
    tokenize_documents,
)
from coref_pipeline.pretrained import load_tokenizer
from tests.paths import FIXTURES

SEGMENT_LENGTHS = [128, 256, 384, 512]


def segment(document, tokenizer, max_segment_len, with_words=True):
    words = [normalize_word(word) for word in document.words]
    [tokenized] = tokenize_documents([words], tokenizer)
    return segment_document(
        document.doc_key,
        tokenized,
        document.sentence_ids,
        document.speakers,
        document.pos,
        document.clusters,
        max_segment_len,
        SpecialTokens.from_tokenizer(tokenizer),
        words=words if with_words else None,
    )


def test_hand_checked_tiny_document(minilm_tokenizer):
    """Worked out by hand from minimize.py's rules (see the comments)."""
    [document] = read_conll(FIXTURES / "tiny.v4_gold_conll")
    result = segment(document, minilm_tokenizer, max_segment_len=8)
    # Subtokens: anna ko ##wal ##cz ##yk met | her brother . | he smiled [UNK] .
    # A segment holds at most 8 - 2 = 6 subtokens. Sentence 0 has 9 subtokens, so the
    # first segment ends on the last word end that fits (met); the second closes the
    # sentence; the third holds sentence 1. The private-use word has no subtokens: [UNK].
    expected = {
        "doc_key": "bc/tiny/00/tiny_0000_0",
        "sentences": [
            ["[CLS]", "anna", "ko", "##wal", "##cz", "##yk", "met", "[SEP]"],
            ["[CLS]", "her", "brother", ".", "[SEP]"],
            ["[CLS]", "he", "smiled", "[UNK]", ".", "[SEP]"],
        ],
        "speakers": [
            ["[SPL]"] + ["Anna_R"] * 6 + ["[SPL]"],
            ["[SPL]"] + ["Anna_R"] * 3 + ["[SPL]"],
            ["[SPL]"] + ["Ben_R"] * 4 + ["[SPL]"],
        ],
        "constituents": [],
        "ner": [],
        # Anna Kowalczyk = flat 1-5, her = 9 (cluster 1); her brother = 9-10, He = 14 (cluster 2).
        "clusters": [[[1, 5], [9, 9]], [[9, 10], [14, 14]]],
        # [CLS] of segment 2 is sentence 0; its [SEP] closes sentence 0, so it is already 1.
        "sentence_map": [0, 0, 0, 0, 0, 0, 0, 0] + [0, 0, 0, 0, 1] + [1, 1, 1, 1, 1, 2],
        # [CLS] carries the previous segment's last word, [SEP] its own segment's last word.
        "subtoken_map": [0, 0, 1, 1, 1, 1, 2, 2] + [2, 3, 4, 5, 5] + [5, 6, 7, 8, 9, 9],
        "pronouns": [14],  # "He" (PRP); "her" is PRP$
        "tokens": ["Anna", "Kowalczyk", "met", "her", "brother", ".", "He", "smiled", "\ue000", "."],
    }
    assert list(result) == list(expected)  # field order, as minimize.py writes them
    clusters = result.pop("clusters")
    assert [sorted(cluster) for cluster in clusters] == expected.pop("clusters")
    assert result == expected
    assert json.loads(json.dumps(result)) == result


def test_without_words_the_fields_are_minimize_py_s(minilm_tokenizer):
    [document] = read_conll(FIXTURES / "tiny.v4_gold_conll")
    result = segment(document, minilm_tokenizer, 8, with_words=False)
    assert list(result) == [
        "doc_key",
        "sentences",
        "speakers",
        "constituents",
        "ner",
        "clusters",
        "sentence_map",
        "subtoken_map",
        "pronouns",
    ]


def test_cluster_lists_are_built_as_minimize_py_builds_them(minilm_tokenizer):
    """minimize.py writes each cluster as list(set(spans)): the same order, for byte-compatibility."""
    [document] = read_conll(FIXTURES / "tiny.v4_gold_conll")
    result = segment(document, minilm_tokenizer, 8)
    # Spans in completion order, put through a set (not a set literal: that compiles to a frozenset).
    assert result["clusters"][0] == [list(span) for span in set([(1, 5), (9, 9)])]  # noqa: C405
    assert result["clusters"][1] == [list(span) for span in set([(9, 10), (14, 14)])]  # noqa: C405


def test_a_word_without_subtokens_keeps_its_mention(minilm_tokenizer):
    text = [
        "#begin document (nw/z); part 000",
        "nw/z 0 0 Look VB * - - - - * -",
        "nw/z 0 1 \u200b NN * - - - - * (0)",
        "nw/z 0 2 there RB * - - - - * (0)",
        "",
        "#end document",
    ]
    [document] = parse_conll_lines(text)
    result = segment(document, minilm_tokenizer, 128)
    assert result["sentences"] == [["[CLS]", "look", "[UNK]", "there", "[SEP]"]]
    assert sorted(result["clusters"][0]) == [[2, 2], [3, 3]]
    assert result["subtoken_map"] == [0, 0, 1, 2, 2]


def test_a_word_longer_than_a_segment_is_an_error(minilm_tokenizer):
    text = [
        "#begin document (nw/long); part 000",
        "nw/long 0 0 Supercalifragilisticexpialidocious JJ * - - - - * -",
        "",
        "#end document",
    ]
    [document] = parse_conll_lines(text)
    with pytest.raises(SegmentationError, match="document 'nw/long_0'.*does not fit a segment of 5"):
        segment(document, minilm_tokenizer, 5)


def test_split_into_segments_prefers_sentence_ends_then_word_ends():
    sentence_end = np.array([0, 0, 1, 0, 0, 0, 0, 1], dtype=bool)
    token_end = np.array([1, 0, 1, 1, 1, 0, 1, 1], dtype=bool)
    # Up to 4 subtokens a segment: sentence 0 fits, sentence 1 (5 subtokens) splits at a word end.
    # The second segment ends on the last word end that fits (6), not on the sentence end (7).
    assert split_into_segments(sentence_end, token_end, 6) == [(0, 2), (3, 6), (7, 7)]
    with pytest.raises(SegmentationError):
        split_into_segments(sentence_end, np.array([0, 0, 0, 0, 0, 0, 0, 1], dtype=bool), 4)


def test_split_into_segments_by_number_of_sentences():
    # Sentences of 2, 3, 1 and 4 subtokens; word ends everywhere.
    sentence_end = np.zeros(10, dtype=bool)
    sentence_end[[1, 4, 5, 9]] = True
    token_end = np.ones(10, dtype=bool)
    assert split_into_segments(sentence_end, token_end, 64, max_sentences=1) == [(0, 1), (2, 4), (5, 5), (6, 9)]
    assert split_into_segments(sentence_end, token_end, 64, max_sentences=2) == [(0, 4), (5, 9)]
    assert split_into_segments(sentence_end, token_end, 64, max_sentences=3) == [(0, 5), (6, 9)]
    # The subtoken limit still holds: 3 sentences would be 6 subtokens, a segment of 6 holds 4.
    assert split_into_segments(sentence_end, token_end, 6, max_sentences=3) == [(0, 1), (2, 5), (6, 9)]
    # A sentence longer than a segment is split at a word end, as minimize.py splits it.
    assert split_into_segments(sentence_end, token_end, 4, max_sentences=1) == [
        (0, 1),
        (2, 3),
        (4, 4),
        (5, 5),
        (6, 7),
        (8, 9),
    ]
    assert split_into_segments(sentence_end, token_end, 64) == [(0, 9)]
    with pytest.raises(SegmentationError, match="max_sentences must be at least 1"):
        split_into_segments(sentence_end, token_end, 64, max_sentences=0)


def test_segment_length_labels():
    assert SegmentLength.parse(384) == SegmentLength(384) and SegmentLength.parse("384").label == 384
    assert SegmentLength.parse("5sent") == SegmentLength(MAX_SENTENCE_SEGMENT_LEN, 5)
    assert SegmentLength.parse("5sent").label == "5sent"
    for bad in ("5 sentences", "0sent", "sent", "2", 2, True, "abc", -1):
        with pytest.raises(ValueError, match="segment length"):
            SegmentLength.parse(bad)


def test_tokenize_documents_matches_tokenizing_each_word(minilm_tokenizer):
    words = [["Hello", "world", "Kowalczyk's", "café", "/."], ["naïve", "Hello"]]
    tokenized = tokenize_documents(words, minilm_tokenizer, chunk_size=2)
    for doc_words, result in zip(words, tokenized, strict=True):
        expected = [piece for word in doc_words for piece in minilm_tokenizer.tokenize(word)]
        assert result.subtokens == expected
        counts = [len(minilm_tokenizer.tokenize(word)) for word in doc_words]
        assert result.word_index.tolist() == np.repeat(np.arange(len(doc_words)), counts).tolist()


def test_tokenizer_from_a_local_directory(minilm_tokenizer, tmp_path):
    """A hub id and a folder go through the same from_pretrained call; test it with a folder."""
    minilm_tokenizer.save_pretrained(tmp_path / "tok")
    tokenizer = load_tokenizer(str(tmp_path / "tok"))
    assert tokenize_documents([["Kowalczyk"]], tokenizer)[0].subtokens == ["ko", "##wal", "##cz", "##yk"]


@pytest.fixture(scope="module")
def litbank_documents(litbank_dir):
    return [document for split in ("train", "dev", "test") for document in read_conll(litbank_dir / f"{split}.conll")]


@pytest.mark.parametrize("max_segment_len", SEGMENT_LENGTHS)
def test_invariants_on_every_litbank_document(litbank_documents, minilm_tokenizer, max_segment_len):
    words = [[normalize_word(word) for word in document.words] for document in litbank_documents]
    tokenized = tokenize_documents(words, minilm_tokenizer)
    special = SpecialTokens.from_tokenizer(minilm_tokenizer)
    for document, tokens in zip(litbank_documents, tokenized, strict=True):
        result = segment_document(
            document.doc_key,
            tokens,
            document.sentence_ids,
            document.speakers,
            document.pos,
            document.clusters,
            max_segment_len,
            special,
        )
        check_document(result, max_segment_len)
        flat = flatten(result["sentences"])
        assert (
            len(flat) == len(flatten(result["speakers"])) == len(result["subtoken_map"]) == len(result["sentence_map"])
        )
        assert all(len(segment) <= max_segment_len for segment in result["sentences"])
        # Mapped back through subtoken_map, the clusters are the word-level gold clusters.
        subtoken_map = result["subtoken_map"]
        back = {frozenset((subtoken_map[s], subtoken_map[e]) for s, e in cluster) for cluster in result["clusters"]}
        assert back == {frozenset(cluster) for cluster in document.clusters}, document.doc_key
        # Every mention lies inside one sentence and never on [CLS]/[SEP].
        for cluster in result["clusters"]:
            for start, end in cluster:
                assert flat[start] not in ("[CLS]", "[SEP]") and flat[end] not in ("[CLS]", "[SEP]")
                assert result["sentence_map"][start] == result["sentence_map"][end]


@pytest.mark.parametrize("sentences", [1, 5, 10])
def test_sentence_segments_on_every_litbank_document(litbank_documents, minilm_tokenizer, sentences):
    words = [[normalize_word(word) for word in document.words] for document in litbank_documents[:20]]
    tokenized = tokenize_documents(words, minilm_tokenizer)
    special = SpecialTokens.from_tokenizer(minilm_tokenizer)
    length = SegmentLength.parse(f"{sentences}sent")
    for document, tokens in zip(litbank_documents[:20], tokenized, strict=True):
        arguments = (document.doc_key, tokens, document.sentence_ids, document.speakers, document.pos)
        result = segment_document(
            *arguments, document.clusters, length.subtokens, special, max_sentences=length.sentences
        )
        check_document(result, length.subtokens)
        sentence_of_word = np.asarray(document.sentence_ids)
        subtoken_map, position = result["subtoken_map"], 0
        for segment in result["sentences"]:
            inner = subtoken_map[position + 1 : position + len(segment) - 1]
            position += len(segment)
            held = set(sentence_of_word[inner].tolist())
            assert len(held) <= sentences, (document.doc_key, sorted(held))
            if len(segment) < length.subtokens - 1:  # not cut by the subtoken limit: ends on a sentence end
                last_word = inner[-1]
                assert (
                    last_word == len(sentence_of_word) - 1
                    or sentence_of_word[last_word + 1] != sentence_of_word[last_word]
                )
        # The same subtokens as the minimize.py segmentation, only cut elsewhere; the same clusters in words.
        plain = segment_document(*arguments, document.clusters, 512, special)
        assert [t for s in result["sentences"] for t in s[1:-1]] == [t for s in plain["sentences"] for t in s[1:-1]]
        back = {frozenset((subtoken_map[s], subtoken_map[e]) for s, e in cluster) for cluster in result["clusters"]}
        assert back == {frozenset(cluster) for cluster in document.clusters}, document.doc_key
        if sentences == 1:  # one sentence a segment: as many segments as sentences (none is over 510 subtokens here)
            assert len(result["sentences"]) >= len(set(document.sentence_ids))


def test_check_document_catches_a_broken_document(minilm_tokenizer):
    [document] = read_conll(FIXTURES / "tiny.v4_gold_conll")
    result = segment(document, minilm_tokenizer, 8)
    result["clusters"].append([[0, 2]])  # starts on [CLS]
    with pytest.raises(AssertionError, match="CLS"):
        check_document(result, 8)
    result["clusters"].pop()
    with pytest.raises(AssertionError, match="segment too long"):
        check_document(result, 7)


def test_tokenized_document_is_a_plain_container():
    tokenized = TokenizedDocument(subtokens=["a"], word_index=np.array([0]))
    assert tokenized.subtokens == ["a"]
