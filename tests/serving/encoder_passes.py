"""The encoder's passes of a loaded model, counted or recorded: what batched prediction's tests read to see documents
share one, and to hold each document's clusters batched against one at a time as far as float32 guarantees."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest
import torch

from coref_pipeline.models.incremental.model import read_to_the_end
from coref_pipeline.serving.coref_model import CorefModel
from tests.tolerances import (
    assert_parts_reordered_close,
    assert_reordered_close,
    head_terms,
    near_tie,
    recorded_coarse_scores,
    same_baseline_decisions_or_near_tie,
    same_spans_or_near_tie,
)

ResultT = TypeVar("ResultT")


def counted_encoder_passes(model: CorefModel, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now until ``monkeypatch`` undoes it, each pass of ``model``'s encoder (of its class) appends the segments
    it read to the returned list."""
    passes: list[int] = []
    encode = type(model.model.encoder).forward

    def counted(self, input_ids, *args, **kwargs):
        passes.append(input_ids.shape[0])
        return encode(self, input_ids, *args, **kwargs)

    monkeypatch.setattr(type(model.model.encoder), "forward", counted)
    return passes


@contextmanager
def recorded_encoder_outputs(model: CorefModel) -> Iterator[list[torch.Tensor]]:
    """Within the block, each pass of ``model``'s encoder (of its class) appends its output ``[subtokens, H]`` to the
    yielded list: one document predicted alone, its passes' outputs concatenated, are the numbers its head read."""
    outputs: list[torch.Tensor] = []
    encoder_class = type(model.model.encoder)
    encode = encoder_class.forward

    def recorded(self, *args, **kwargs):
        output = encode(self, *args, **kwargs)
        outputs.append(output.detach().clone())
        return output

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(encoder_class, "forward", recorded)
        yield outputs


def encoder_terms(config, width: int) -> int:
    """The reduction lengths along a BERT encoder (``tests/tolerances.py``): per layer the Q/K/V and output
    projections, the attention's dot products and its sums over ``width`` positions, two LayerNorms, the
    feed-forward's two layers; and the embeddings' LayerNorm."""
    hidden, heads = config.hidden_size, config.num_attention_heads
    layer = 4 * hidden + hidden // heads + 2 * width + config.intermediate_size
    return config.num_hidden_layers * layer + hidden


def assert_head_together_as_alone(model: CorefModel, tensors: Any, hidden: torch.Tensor, together: Any) -> bool:
    """The baseline's head run over a group (``together``: its ``CorefOutput`` for this document) against its head
    run alone on the same encoder output ``hidden``: the same spans and antecedents, the scores within the float
    bound; the same clusters, but where a near tie in the scores alone lets float32's rounding tip a decision (or
    in the candidates' mention scores, which pruning ranks, or in a span's coarse scores, which rank its antecedents:
    then nothing after it is compared). Returns whether the clusters are the same."""
    with recorded_coarse_scores(model.model) as coarse:
        alone = model._forward_for_inference(tensors, hidden)
    terms, key = head_terms(model.model), tensors.doc_key
    assert_reordered_close(together.candidate_mention_scores, alone.candidate_mention_scores, terms, msg=key)
    if not same_baseline_decisions_or_near_tie(
        together, alone, coarse[0], model.model.config.min_coarse_score, terms, key
    ):
        return False  # a near tie in the mention ranking or a span's antecedents tipped: what reads them differs
    assert_reordered_close(together.top_antecedent_scores, alone.top_antecedent_scores, terms, msg=key)
    same = model._baseline_clusters(together) == model.predict_tensors(tensors, hidden)
    assert same or near_tie(alone.top_antecedent_scores, terms), key
    return same


def assert_spans_together_as_alone(
    model: CorefModel, tensors: Any, hidden: torch.Tensor, spans: Any, together: Any
) -> bool:
    """The incremental model's kept spans read with a group's (``spans``: this document's ``SegmentSpans`` from
    ``group_spans``; ``together``: its output) against its spans read alone on the same encoder output ``hidden``:
    the same spans (but at a near tie in the candidates' mention scores, which pruning ranks: then nothing after it
    is compared), their embeddings, mention scores and pair-scorer projections within the float bound; and its
    clusters batched exactly its decisions alone on the group's spans (nothing else of the group reaches them).
    Returns whether its clusters are those of alone."""
    inner, key = model.model, tensors.doc_key
    terms = head_terms(inner)
    with model._evaluation_mode():
        segment = inner.segment_outputs(tensors, hidden)
        alone = inner.span_windows(tensors, segment)(0, 0)
        starts, ends = inner.candidate_spans(tensors, slice(0, tensors.num_tokens))
        scores = inner.span_scorer.candidate_scores(segment(0), starts, ends).scores  # [candidates] alone
        crossing = inner.config.crossing_spans
        if not same_spans_or_near_tie(spans.spans, alone.spans, (scores, starts, ends), terms, crossing, key):
            return False  # a near tie in the mention ranking tipped: what reads the spans differs
        decided = read_to_the_end(inner.read_segments(tensors, hidden, spans_of=lambda index, offset: spans))
    assert torch.equal(spans.starts, alone.starts) and torch.equal(spans.ends, alone.ends), key
    assert_reordered_close(spans.embeddings, alone.embeddings, terms, msg=key)
    assert_reordered_close(spans.mention_scores, alone.mention_scores, terms, msg=key)
    if spans.projections is not None:  # the pair scorer's projections, computed for the group's spans together
        with model._evaluation_mode():
            assert_parts_reordered_close(spans.projections, inner.span_projections(alone.embeddings), terms, key)
    assert together.clusters == decided.clusters, key
    return together.clusters == model.predict_tensors(tensors, hidden)


def batched_as_one_at_a_time(
    model: CorefModel, predict: Callable[[], ResultT], least_clusters: int = 1
) -> tuple[ResultT, list[bool]]:
    """Runs ``predict()``, a batched prediction through ``model``, and holds every document it predicted against one
    document at a time as far as float32 guarantees: batched, its head read an encoder output within the float bound
    of the one it reads alone (or, predicted as one at a time, the same numbers); and its head on the numbers it reads
    alone gives exactly its clusters alone. Its clusters batched then differ from one at a time only where a rounding
    of the encoder's reordered sums (a group pads segments to another width) tips a decision between near-equal
    scores, which no CPU's arithmetic rules out: an exact comparison would hold one CPU's rounding. Where it read the
    same numbers, its clusters are the same (asserted here). A document whose head ran with its group's
    (``CorefModel.predict_group``) is also held to its head alone on the numbers it read (the baseline's:
    ``assert_head_together_as_alone``; the incremental model's spans: ``assert_spans_together_as_alone``, and a
    longer document's clusters exactly), and counts as reading the same numbers where its clusters there are the
    same too. Returns ``predict``'s result and, for each document the encoder read (those with words), in their
    order, whether it read the same numbers."""
    pools: list[tuple[Sequence[Any], list[Any]]] = []
    read: dict[int, torch.Tensor | None] = {}
    together: dict[int, Any] = {}
    predict_tensor_pool, predict_tensors = CorefModel.predict_tensor_pool, CorefModel.predict_tensors
    forward_group, group_spans = type(model.model).forward_group, getattr(type(model.model), "group_spans", None)
    grouped_spans: dict[int, Any] = {}  # the incremental model's: a document's spans read with its group's

    def pool_spy(self, documents, max_tokens):
        outcomes = predict_tensor_pool(self, documents, max_tokens)
        pools.append((documents, outcomes))
        return outcomes

    def spy(self, tensors, hidden=None):
        read[id(tensors)] = None if hidden is None else hidden.detach().clone()
        return predict_tensors(self, tensors, hidden)

    def group_spy(self, documents, hidden):
        outputs = forward_group(self, documents, hidden)
        for tensors, encoded, output in zip(documents, hidden, outputs, strict=True):
            read[id(tensors)], together[id(tensors)] = encoded.detach().clone(), output
        return outputs

    def spans_spy(self, documents, hidden):
        found = group_spans(self, documents, hidden)
        grouped_spans.update((id(documents[position]), spans) for position, spans in found.items())
        return found

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CorefModel, "predict_tensor_pool", pool_spy)
        patch.setattr(CorefModel, "predict_tensors", spy)
        patch.setattr(type(model.model), "forward_group", group_spy)
        if group_spans is not None:
            patch.setattr(type(model.model), "group_spans", spans_spy)
        result = predict()
    terms = encoder_terms(model.model.encoder.model.config, model.config.max_segment_len)
    same, clusters_alone = [], 0
    for documents, outcomes in pools:
        for tensors, batched in zip(documents, outcomes, strict=True):
            with recorded_encoder_outputs(model) as outputs:
                alone = model.predict_tensors(tensors)
            alone_hidden = torch.cat(outputs)  # [n, H]: the numbers its head read
            assert model.predict_tensors(tensors, alone_hidden) == alone, tensors.doc_key
            clusters_alone += len(alone)
            hidden = read[id(tensors)]
            if hidden is not None:
                assert_reordered_close(hidden, alone_hidden, terms, msg=tensors.doc_key)
            same.append(hidden is None or torch.equal(hidden, alone_hidden))
            if id(tensors) in grouped_spans:
                spans = grouped_spans[id(tensors)]
                same[-1] &= assert_spans_together_as_alone(model, tensors, hidden, spans, together[id(tensors)])
            elif id(tensors) in together and model.model_type == "incremental":  # read as alone
                assert together[id(tensors)].clusters == model.predict_tensors(tensors, hidden), tensors.doc_key
            elif id(tensors) in together:
                same[-1] &= assert_head_together_as_alone(model, tensors, hidden, together[id(tensors)])
            if same[-1]:
                assert batched == alone, tensors.doc_key
    assert pools and clusters_alone >= least_clusters  # decisions to see
    return result, same


def assert_same_where_read_the_same(batched: list[Any], alone: list[Any], read_the_same: list[bool]) -> None:
    """``batched`` and ``alone`` (what a surface made of each document the encoder read, in their order) equal for
    every document that read the same numbers batched as alone (``batched_as_one_at_a_time``)."""
    assert len(batched) == len(alone) == len(read_the_same)
    assert [item for item, same in zip(batched, read_the_same, strict=True) if same] == [
        item for item, same in zip(alone, read_the_same, strict=True) if same
    ]
