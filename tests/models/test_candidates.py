"""No candidate span of either model covers [CLS], [SEP] or padding, unless the original's rule is asked for."""

from __future__ import annotations

import pytest
import torch

from coref_pipeline.models.baseline import BaselineCorefModel
from coref_pipeline.models.config import IncrementalConfig
from coref_pipeline.models.document import DocumentTensors
from coref_pipeline.models.incremental import IncrementalCorefModel
from tests.models.tiny import VOCAB, make_document, tiny_config, tiny_encoder, tiny_tensors

SPECIAL_IDS = {VOCAB.index("[CLS]"), VOCAB.index("[SEP]"), VOCAB.index("[PAD]")}


def flat_token_ids(document: DocumentTensors) -> list[int]:
    """The document's subtoken ids as the model's positions see them (padding removed)."""
    return document.input_ids[document.attention_mask.bool()].tolist()


def assert_no_special_token_inside(token_ids: list[int], starts: torch.Tensor, ends: torch.Tensor) -> None:
    assert starts.numel() > 0
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        covered = token_ids[start : end + 1]
        assert len(covered) == end - start + 1, f"span ({start}, {end}) runs past the tokens"
        assert not SPECIAL_IDS & set(covered), f"candidate ({start}, {end}) covers a special token: {covered}"


def test_the_tiny_corpus_has_sentences_that_run_over_a_segment_boundary():
    # As in minimize.py, [SEP] takes the next sentence's id and the next [CLS] the same, so
    # the sentence map alone would allow a span "[SEP] [CLS] w": the case under test.
    document = tiny_tensors(make_document(num_segments=3), tiny_config())
    token_ids, sentence_map = flat_token_ids(document), document.sentence_map.tolist()
    cls_positions = [i for i, token in enumerate(token_ids) if token == VOCAB.index("[CLS]")][1:]
    assert any(sentence_map[i - 1] == sentence_map[i] == sentence_map[i + 1] for i in cls_positions)


@pytest.mark.parametrize("word_boundary_spans", [False, True])
def test_no_baseline_candidate_covers_a_special_token(word_boundary_spans):
    config = tiny_config(word_boundary_spans=word_boundary_spans)
    model = BaselineCorefModel(config, tiny_encoder()).eval()
    for seed in range(3):
        document = tiny_tensors(make_document(seed=seed, num_segments=3), config)
        with torch.no_grad():
            output = model(document)
        token_ids = flat_token_ids(document)
        assert_no_special_token_inside(token_ids, output.candidate_starts, output.candidate_ends)
        assert_no_special_token_inside(token_ids, output.top_span_starts, output.top_span_ends)


@pytest.mark.parametrize("word_boundary_spans", [False, True])
def test_no_incremental_candidate_covers_a_special_token(word_boundary_spans, monkeypatch):
    baseline = tiny_config(word_boundary_spans=word_boundary_spans).to_dict()
    config = IncrementalConfig.from_baseline(baseline, {"dropout_rate": 0.0, "threshold": -1e9})
    model = IncrementalCorefModel(config, tiny_encoder()).eval()
    seen: list[tuple[slice, torch.Tensor, torch.Tensor]] = []
    original = DocumentTensors.candidate_spans

    def recording(self, max_span_width, word_boundaries, window=slice(None), special_tokens=False):
        starts, ends = original(self, max_span_width, word_boundaries, window, special_tokens)
        seen.append((window, starts, ends))
        return starts, ends

    monkeypatch.setattr(DocumentTensors, "candidate_spans", recording)
    for seed in range(3):
        document = tiny_tensors(make_document(seed=seed, num_segments=3), config)
        seen.clear()
        with torch.no_grad():
            output = model(document)
        token_ids = flat_token_ids(document)
        # The candidates are enumerated per window of whole segments (one or several), which cover the document.
        assert [window.start for window, _, _ in seen][0] == 0 and seen[-1][0].stop == document.num_tokens
        assert all(a[0].stop == b[0].start for a, b in zip(seen, seen[1:], strict=False))
        for window, starts, ends in seen:
            assert_no_special_token_inside(token_ids[window], starts, ends)
        # Every span of every predicted entity (a threshold that keeps them all) is clean too.
        spans = [span for cluster in output.clusters for span in cluster]
        assert spans
        assert_no_special_token_inside(
            token_ids, torch.tensor([s for s, _ in spans]), torch.tensor([e for _, e in spans])
        )


def test_with_the_originals_rule_the_sentence_map_alone_decides():
    """``special_token_spans``: every span of at most max_span_width inside one sentence id of the map, as
    ``independent.py`` enumerates them, so spans over [CLS] and [SEP] (and across a segment boundary) too."""
    config = tiny_config(special_token_spans=True)
    model = BaselineCorefModel(config, tiny_encoder()).eval()
    document = tiny_tensors(make_document(num_segments=3), config)
    with torch.no_grad():
        output = model(document)
    sentence_map, n, width = document.sentence_map.tolist(), document.num_tokens, config.max_span_width
    expected = [(s, e) for s in range(n) for e in range(s, min(n, s + width)) if sentence_map[s] == sentence_map[e]]
    assert list(zip(output.candidate_starts.tolist(), output.candidate_ends.tolist(), strict=True)) == expected
    token_ids, cls = flat_token_ids(document), VOCAB.index("[CLS]")
    assert any(token_ids[s] == cls and s > 0 for s, e in expected if e > s)  # from [CLS] on, in a later segment
    assert any(cls in token_ids[s + 1 : e + 1] for s, e in expected)  # over a segment boundary
