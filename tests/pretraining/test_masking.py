"""SpanBERT's masking: its statistics on a large synthetic text, whole words, never a special token."""

from __future__ import annotations

import random

import pytest

from coref_pipeline.config_base import ConfigError
from coref_pipeline.pretraining.masking import IGNORE_INDEX, MaskingScheme

MASK_ID = 103
RANDOM_IDS = list(range(1000, 30000))


def synthetic_segment(rng: random.Random, length: int = 384) -> tuple[list[int], list[int | None]]:
    """[CLS] words [SEP]: words of 1 to 4 subtokens (mostly 1, as English under a BERT vocabulary)."""
    ids, words = [101], [None]
    word = 0
    while len(ids) < length - 1:
        pieces = min(rng.choices([1, 2, 3, 4], weights=[70, 20, 7, 3])[0], length - 1 - len(ids))
        ids += [rng.randrange(1000, 30000) for _ in range(pieces)]
        words += [word] * pieces
        word += 1
    return ids + [102], words + [None]


def masked_corpus(scheme: MaskingScheme, segments: int, seed: int = 0):
    rng = random.Random(seed)
    text_rng = random.Random(1234)
    for _ in range(segments):
        ids, words = synthetic_segment(text_rng)
        yield ids, words, scheme.mask(ids, words, MASK_ID, RANDOM_IDS, rng)


def truncated_geometric_mean(p: float, top: int) -> float:
    """E[L] for P(L = l) proportional to p (1 - p)^(l - 1), l = 1..top."""
    numerator = sum(length * p * (1 - p) ** (length - 1) for length in range(1, top + 1))
    return numerator / sum(p * (1 - p) ** (length - 1) for length in range(1, top + 1))


def test_span_masking_has_spanberts_statistics_on_a_large_text():
    scheme = MaskingScheme()  # span, 15%, Geo(0.2) truncated at 10, 80/10/10 per span
    span_words, replacements = [], {"mask": 0, "random": 0, "same": 0}
    masked = maskable = 0
    for ids, words, out in masked_corpus(scheme, 1500):
        maskable += sum(word is not None for word in words)
        masked += sum(label != IGNORE_INDEX for label in out.labels)
        for span in out.spans:
            # whole words: the span starts at a word's first subtoken and ends at a word's last
            assert words[span.start] is not None and words[span.end] is not None
            assert span.start == 0 or words[span.start - 1] != words[span.start]
            assert span.end == len(words) - 1 or words[span.end + 1] != words[span.end]
            span_words.append(words[span.end] - words[span.start] + 1)
            replacements[span.replacement] += 1
            window = out.input_ids[span.start : span.end + 1]
            if span.replacement == "mask":  # decided per span: every subtoken of it
                assert window == [MASK_ID] * len(window)
            elif span.replacement == "same":
                assert window == ids[span.start : span.end + 1]
            else:
                assert all(token in RANDOM_IDS for token in window)
        # never a special token; labels are the original subtokens where masked, and only there
        assert out.labels[0] == out.labels[-1] == IGNORE_INDEX and out.input_ids[0] == 101 and out.input_ids[-1] == 102
        in_spans = {position for span in out.spans for position in range(span.start, span.end + 1)}
        assert {i for i, label in enumerate(out.labels) if label != IGNORE_INDEX} == in_spans
        assert all(out.labels[i] == ids[i] for i in in_spans)
        assert all(out.input_ids[i] == ids[i] for i in range(len(ids)) if i not in in_spans)
    mean = sum(span_words) / len(span_words)
    assert truncated_geometric_mean(0.2, 10) == pytest.approx(3.8, abs=0.01)  # the paper's 3.8
    assert mean == pytest.approx(truncated_geometric_mean(0.2, 10), abs=0.1)
    assert 100 * masked / maskable == pytest.approx(15.0, abs=1.0)
    total = sum(replacements.values())
    assert 100 * replacements["mask"] / total == pytest.approx(80, abs=2)
    assert 100 * replacements["random"] / total == pytest.approx(10, abs=2)
    assert 100 * replacements["same"] / total == pytest.approx(10, abs=2)


@pytest.mark.parametrize("masking", ["whole_word", "subword"])
def test_berts_maskings_mask_one_word_or_one_subtoken_at_a_time(masking):
    masked = maskable = 0
    for _, words, out in masked_corpus(MaskingScheme(masking=masking), 300):
        maskable += sum(word is not None for word in words)
        masked += sum(label != IGNORE_INDEX for label in out.labels)
        for span in out.spans:
            if masking == "subword":
                assert span.start == span.end
            else:
                assert words[span.start] == words[span.end]
                assert span.start == 0 or words[span.start - 1] != words[span.start]
                assert words[span.end + 1] != words[span.end]
    assert 100 * masked / maskable == pytest.approx(15.0, abs=1.0)


def test_the_same_seed_masks_the_same_and_another_does_not():
    scheme = MaskingScheme()
    first = [out for _, _, out in masked_corpus(scheme, 20, seed=5)]
    assert first == [out for _, _, out in masked_corpus(scheme, 20, seed=5)]
    assert first != [out for _, _, out in masked_corpus(scheme, 20, seed=6)]


def test_a_segment_of_special_tokens_only_masks_nothing():
    out = MaskingScheme().mask([101, 102], [None, None], MASK_ID, RANDOM_IDS, random.Random(0))
    assert out.spans == [] and out.labels == [IGNORE_INDEX, IGNORE_INDEX] and out.input_ids == [101, 102]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"masking": "entity"}, "masking key 'masking' must be one of"),
        ({"mask_ratio": 0.0}, "masking key 'mask_ratio' must be in"),
        ({"max_span_words": 0}, "masking key 'max_span_words' must be at least 1"),
        ({"mask_share": 0.8, "random_share": 0.3}, "masking key 'random_share' must be in"),
    ],
)
def test_a_bad_scheme_is_one_line(values, message):
    with pytest.raises(ConfigError, match=message):
        MaskingScheme.from_dict(values)
