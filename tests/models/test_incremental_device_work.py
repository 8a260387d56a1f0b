"""The incremental model's device work per segment does not grow with the segment's spans.

A segment's scores are computed in a fixed number of batched passes and its decisions taken on the host over
them (models/incremental/), so a document read with twice the spans per segment makes no more host reads
(each a synchronisation on a GPU) and no more calls of the fine FFNN; what may add some is named and bounded:
with ``max_top_entities`` the rounds for pairs the pre-filter's pass left out (at most about log2(columns / K)
a segment), and with scored entity representations one pass per update (the new representation's scores
against the later spans: it exists only once the span joined).

Host reads and operator events are counted as benchmarks/gpu/device_ops.py counts them (tests/models/host_reads.py).
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
import torch

import coref_pipeline.models.incremental.scoring as scoring_module
from coref_pipeline.models.config import IncrementalConfig
from coref_pipeline.models.incremental import IncrementalCorefModel, SegmentScores
from tests.models.host_reads import counting_host_reads
from tests.models.test_incremental import spread_pair_weights
from tests.models.tiny import make_document, tiny_config, tiny_encoder, tiny_tensors

SEGMENT_LENGTH = 48


class Work:
    """What one run issued: host reads, aten operator events, fine-FFNN calls, and the passes that may add some."""

    def __init__(self) -> None:
        self.reads = 0
        self.events = 0
        self.fine_calls = 0
        self.rounds = 0  # passes for pairs the pre-filter left out
        self.versions = 0  # passes for an updated representation

    @property
    def fixed_reads(self) -> int:
        """The reads but one per round and per version pass (what may not grow with the spans)."""
        return self.reads - self.rounds - self.versions

    @property
    def fixed_fine_calls(self) -> int:
        return self.fine_calls - self.rounds - self.versions


@contextmanager
def counted(model: IncrementalCorefModel, monkeypatch: pytest.MonkeyPatch):
    work = Work()
    scores, score_missing, version_pass = (
        model.pair_scorer.scores,
        SegmentScores.score_missing,
        SegmentScores.version_pass,
    )

    def fine(*args, **kwargs):
        work.fine_calls += 1
        return scores(*args, **kwargs)

    def missing(self, *args):
        work.rounds += 1
        return score_missing(self, *args)

    def version(self, position, *args):
        work.versions += position + 1 < len(self.located_host)  # a pass only when a later span reads it
        return version_pass(self, position, *args)

    with monkeypatch.context() as patch, counting_host_reads(monkeypatch) as reads:
        patch.setattr(model.pair_scorer, "scores", fine)
        patch.setattr(SegmentScores, "score_missing", missing)
        patch.setattr(SegmentScores, "version_pass", version)
        yield work
    work.reads, work.events = reads.reads, reads.events


def model_at(ratio: float, **overrides) -> IncrementalCorefModel:
    """The tiny model on segments of 48 subtokens, keeping ``ratio`` of each segment's subtokens as spans."""
    torch.manual_seed(0)
    baseline = tiny_config(max_segment_len=SEGMENT_LENGTH, max_span_width=4)
    values = dict(dropout_rate=0.0, top_span_ratio=ratio, threshold=0.5, evict_distance=80, evict_singleton_distance=40)
    model = IncrementalCorefModel(IncrementalConfig.from_baseline(baseline, values | overrides), tiny_encoder(seed=1))
    spread_pair_weights(model, std=0.2)
    return model


def run(model: IncrementalCorefModel, document, train: bool, monkeypatch: pytest.MonkeyPatch):
    with counted(model, monkeypatch) as work:
        if train:
            torch.manual_seed(5)
            for loss in model.train().training_losses(document):
                loss.backward()
                float(loss.detach())  # the training loop reads each step's losses once
            output = None
        else:
            with torch.no_grad():
                output = model.eval()(document)
    return work, output


# The recommended preset's kind of model (mention columns, the pre-filter, the baseline's pair features, the
# calibrated score, negative sampling, the mention loss, the coarse floor at inference) and its variants.
MENTION_COLUMNS = {
    "recommended": dict(
        score="calibrated",
        pair_features="baseline",
        recent_mentions=3,
        entity_representation=False,
        max_top_entities=4,
        min_coarse_score=0.0,
        negative_sample_rate=0.5,
        loss="all_antecedents",
        mention_loss_coef=0.5,
        mention_loss_spans="top",
    ),
    "no_prefilter": dict(recent_mentions=2, entity_representation=False),
    "paper_features_k3": dict(score="paper", recent_mentions=2, entity_representation=False, max_top_entities=3),
}


def read_twice(setting: dict, train: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Work, Work, int]:
    """The work of one document read keeping 0.2 and 0.4 of each segment's subtokens as spans; its segments."""
    document = tiny_tensors(
        make_document(num_segments=5, seed=4, seg_len=SEGMENT_LENGTH), tiny_config(max_segment_len=SEGMENT_LENGTH)
    )
    work, spans = {}, {}
    for ratio in (0.2, 0.4):
        work[ratio], output = run(model_at(ratio, **setting), document, train, monkeypatch)
        if not train:
            spans[ratio] = len(output.kept_spans)
            assert len(output.clusters) >= 2
    if not train:
        assert spans[0.4] >= 1.9 * spans[0.2]
    return work[0.2], work[0.4], document.num_segments


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("setting", MENTION_COLUMNS.values(), ids=MENTION_COLUMNS.keys())
def test_twice_the_spans_make_no_more_host_reads_or_fine_ffnn_calls(setting, train, monkeypatch):
    few, many, segments = read_twice(setting, train, monkeypatch)
    assert many.versions == few.versions == 0  # no representation is scored
    assert many.fixed_reads <= few.fixed_reads
    assert many.fixed_fine_calls <= few.fixed_fine_calls
    assert many.fixed_reads <= 10 * segments  # a few per segment: a fixed number, not one per span
    # The pre-filter's rounds: each doubles what the later spans have scored, so a segment has at most about
    # log2(its columns / (K + margin)) + 1 of them (its static rows, the base rows and its spans, are under 200).
    limit = setting.get("max_top_entities")
    if limit is None:
        assert many.rounds == 0
    else:
        assert many.rounds <= segments * (1 + np.ceil(np.log2(200 / (limit + 1))))


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("setting", MENTION_COLUMNS.values(), ids=MENTION_COLUMNS.keys())
def test_without_the_prefilters_rounds_twice_the_spans_make_the_same_operator_calls(setting, train, monkeypatch):
    """With a pre-filter margin that covers every column (no rounds), the same passes on larger tensors: the same
    host reads, fine-FFNN calls and operator events, give or take a few (data-dependent empty cases)."""
    monkeypatch.setattr(scoring_module, "PREFILTER_MARGIN", 100.0)
    monkeypatch.setattr(scoring_module, "INFERENCE_PREFILTER_MARGIN", 100.0)
    few, many, _ = read_twice(setting, train, monkeypatch)
    assert many.rounds == few.rounds == 0
    assert many.reads == few.reads and many.fine_calls == few.fine_calls
    assert abs(many.events - few.events) <= 0.01 * few.events


@pytest.mark.parametrize("update", ["learned", "mean"])
def test_with_scored_representations_each_update_adds_one_pass_and_nothing_per_span(update, monkeypatch):
    """Scored entity representations: each update makes a representation no pass could know in advance, scored
    in one pass against the later spans (and read back once); the rest does not grow with the spans."""
    few, many, _ = read_twice(dict(update=update, recent_mentions=2), False, monkeypatch)
    assert many.versions > few.versions > 0  # more spans join entities
    assert many.fixed_reads <= few.fixed_reads
    assert many.fixed_fine_calls <= few.fixed_fine_calls
