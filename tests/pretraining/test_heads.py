"""SpanBERT's heads: the span boundary objective's inputs, and both decoders tied to the input embeddings."""

from __future__ import annotations

import torch
from torch import nn

from coref_pipeline.pretraining.heads import MaskedLMHead, SpanBoundaryHead, SpanTargets
from coref_pipeline.pretraining.masking import MaskedSpan

HIDDEN, VOCABULARY = 8, 50


def test_the_span_boundary_head_reads_the_outside_boundaries_and_the_relative_position():
    embeddings = nn.Embedding(VOCABULARY, HIDDEN)
    head = SpanBoundaryHead(embeddings, HIDDEN, max_span_subtokens=2)
    hidden = torch.randn(12, HIDDEN)  # [CLS] w1 .. w10 [SEP]
    # a span over subtokens 3..5 and one over 8: x_{s-1}, x_{e+1} are 2 and 6, then 7 and 9
    targets = SpanTargets.of([MaskedSpan(3, 5, "mask"), MaskedSpan(8, 8, "same")], max_span_subtokens=2)
    assert targets.position.tolist() == [3, 4, 8]  # subtoken 5 is past the position table: the masked LM's alone
    assert targets.left.tolist() == [2, 2, 7] and targets.right.tolist() == [6, 6, 9]
    assert targets.offset.tolist() == [0, 1, 0]  # p_{i-s+1}, 0-based
    inputs = head.inputs(hidden, targets)
    position = head.positions.weight
    expected = torch.stack(
        [
            torch.cat([hidden[2], hidden[6], position[0]]),
            torch.cat([hidden[2], hidden[6], position[1]]),
            torch.cat([hidden[7], hidden[9], position[0]]),
        ]
    )
    assert torch.equal(inputs, expected)
    assert inputs.shape == (3, 2 * HIDDEN + 200)
    # nothing else of the segment reaches a prediction: the gradient reaches the boundaries only
    hidden.requires_grad_(True)
    head(hidden, targets).sum().backward()
    touched = (hidden.grad.abs().sum(dim=1) > 0).nonzero().flatten().tolist()
    assert touched == [2, 6, 7, 9]


def test_both_decoders_are_the_input_embedding_matrix_and_train_it():
    embeddings = nn.Embedding(VOCABULARY, HIDDEN)
    mlm, sbo = MaskedLMHead(embeddings, HIDDEN), SpanBoundaryHead(embeddings, HIDDEN, max_span_subtokens=4)
    assert mlm.decoder.weight is embeddings.weight and sbo.decoder.weight is embeddings.weight
    assert "decoder.weight" not in dict(mlm.named_parameters())  # the encoder owns it; each head its own bias
    assert mlm.decoder.bias is not sbo.decoder.bias
    with torch.no_grad():
        embeddings.weight[7] += 1.0  # a change to the embeddings is a change to both decoders
    hidden = torch.randn(3, HIDDEN)
    manual = mlm.transform(hidden) @ embeddings.weight.t() + mlm.decoder.bias
    assert torch.equal(mlm(hidden), manual)
    targets = SpanTargets.of([MaskedSpan(1, 1, "mask")], max_span_subtokens=4)
    (mlm(hidden).logsumexp(-1).sum() + sbo(hidden, targets).logsumexp(-1).sum()).backward()
    assert embeddings.weight.grad is not None and embeddings.weight.grad.abs().sum() > 0


def test_a_segment_without_spans_has_no_targets():
    targets = SpanTargets.of([], max_span_subtokens=4)
    assert targets.position.shape == (0,) and targets.position.dtype == torch.long
