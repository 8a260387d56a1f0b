"""The coarse-to-fine baseline: shapes, masks, the rearranged computations, the loss, decoding."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from coref_pipeline.models.baseline import BaselineCorefModel, antecedent_loss, mention_loss, predicted_clusters
from coref_pipeline.models.config import BaselineConfig, ConfigError
from coref_pipeline.models.document import crop, random_crop
from coref_pipeline.models.layers import FFNN, Dropout
from coref_pipeline.models.spans import bucket_distance, span_cluster_ids
from tests.models.tiny import make_document, tiny_config, tiny_encoder, tiny_tensors
from tests.tolerances import (
    assert_reordered_close,
    ffnn_terms,
    head_terms,
    near_tie,
    recorded_coarse_scores,
    same_baseline_decisions_or_near_tie,
)


@pytest.fixture
def model_and_document():
    config = tiny_config()
    model = BaselineCorefModel(config, tiny_encoder())
    model.eval()
    return model, tiny_tensors(make_document(num_segments=3), config)


def test_shapes_and_masks(model_and_document):
    model, document = model_and_document
    with torch.no_grad():
        output = model(document)
    n = document.num_tokens
    k = min(int(n * model.config.top_span_ratio), output.candidate_starts.numel())
    c = min(model.config.max_top_antecedents, k)
    assert output.top_span_starts.shape == (k,)
    assert output.top_antecedents.shape == (k, c)
    assert output.top_antecedent_scores.shape == (k, c + 1)
    assert torch.all(output.top_antecedent_scores[:, 0] == 0)  # the dummy
    # An antecedent is valid exactly when it comes earlier; invalid ones score -inf.
    earlier = output.top_antecedents < torch.arange(k).unsqueeze(1)
    assert torch.equal(output.top_antecedent_mask, earlier)
    assert torch.all(torch.isinf(output.top_antecedent_scores[:, 1:][~earlier]))
    assert torch.all(torch.isfinite(output.top_antecedent_scores[:, 1:][earlier]))
    # Kept spans sorted by (start, end), inside a sentence, none on [CLS]/[SEP] unless word-level flags say so.
    spans = list(zip(output.top_span_starts.tolist(), output.top_span_ends.tolist(), strict=True))
    assert spans == sorted(spans)
    assert all(document.sentence_map[s] == document.sentence_map[e] for s, e in spans)
    assert torch.isfinite(output.loss)


def test_word_boundary_spans_never_touch_special_tokens():
    config = tiny_config(word_boundary_spans=True)
    model = BaselineCorefModel(config, tiny_encoder()).eval()
    document = tiny_tensors(make_document(num_segments=2), config)
    with torch.no_grad():
        output = model(document)
    assert document.word_start[output.candidate_starts].all() and document.word_end[output.candidate_ends].all()


def explicit_mention_scores(model, hidden, starts, ends):
    """Mention scores from explicit g = [h_s; h_e; width; head] through the FFNN, as the original."""
    scorer = model.span_scorer
    g = scorer.span_embeddings(hidden, starts, ends, scorer.span_width_embeddings(ends - starts))
    scores = scorer.mention_scores(g).squeeze(1)
    prior = scorer.width_scores(scorer.span_width_prior_embeddings.weight).squeeze(1)
    return scores + prior[ends - starts]


def test_rearranged_mention_scores_equal_the_direct_ones(model_and_document):
    model, document = model_and_document
    with torch.no_grad():
        hidden = model.encoder(document.input_ids, document.attention_mask)
        output = model(document)
        direct = explicit_mention_scores(model, hidden, output.candidate_starts, output.candidate_ends)
        width = model.span_scorer.span_width_embeddings(output.candidate_ends - output.candidate_starts)
        fast = model.span_scorer.score_candidates(hidden, output.candidate_starts, output.candidate_ends, width)
    # The first layer's span_dim inputs summed in other groups (per token, per span), then the FFNN.
    terms = ffnn_terms(model.span_scorer.mention_scores)
    assert_reordered_close(fast, direct, terms)
    assert_reordered_close(output.candidate_mention_scores, direct, terms)


def test_rearranged_fine_scores_equal_the_direct_ones(model_and_document):
    model, document = model_and_document
    with torch.no_grad():
        output = model(document)
        g = output.top_span_emb
        antecedents = output.top_antecedents
        features = model.pair_features(
            antecedents, output.top_span_starts, document.speaker_ids, document.segment_of_token, document.genre
        )
        k, c = antecedents.shape
        pair = torch.cat(
            [g.unsqueeze(1).expand(k, c, -1), g[antecedents], g.unsqueeze(1) * g[antecedents], features], dim=2
        )
        direct = model.pair_scorer.slow_antecedent_scores(pair).squeeze(2)
        fast = model.fine_scores(g, antecedents, features)
    # The first layer's pair inputs summed in other groups (targets, candidates, products), then the FFNN.
    assert_reordered_close(fast, direct, ffnn_terms(model.pair_scorer.slow_antecedent_scores))


def test_loss_is_the_marginal_log_likelihood_on_a_hand_built_case():
    # Three kept spans; span 2 has antecedents [0, 1]; span 1 has [0] (and a masked slot).
    scores = torch.tensor([[0.0, -math.inf, -math.inf], [0.0, 1.0, -math.inf], [0.0, 2.0, 0.5]])
    antecedents = torch.tensor([[0, 0], [0, 0], [0, 1]])
    mask = torch.tensor([[False, False], [True, False], [True, True]])
    span_ids = torch.tensor([7, 0, 7])  # spans 0 and 2 corefer; span 1 is not a mention
    loss = antecedent_loss(scores, antecedents, mask, span_ids)
    # span 0: only the dummy -> 0. span 1: dummy gold -> log(1 + e) - 0.
    # span 2: gold antecedent 0 (score 2) -> log(1 + e^2 + e^0.5) - 2.
    expected = math.log(1 + math.e) + math.log(1 + math.exp(2) + math.exp(0.5)) - 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_the_dummy_is_gold_when_no_gold_antecedent_was_kept():
    # Span 1 (cluster 5) has one kept antecedent, span 0, of another cluster (6).
    scores = torch.tensor([[0.0, -math.inf], [0.0, 3.0]])
    antecedents, mask = torch.tensor([[0], [0]]), torch.tensor([[False], [True]])
    loss = antecedent_loss(scores, antecedents, mask, torch.tensor([6, 5]))
    assert loss.item() == pytest.approx(math.log(1 + math.exp(3)), rel=1e-6)
    # Same clusters: the antecedent is gold and the loss is -log P(antecedent).
    loss = antecedent_loss(scores, antecedents, mask, torch.tensor([5, 5]))
    assert loss.item() == pytest.approx(math.log(1 + math.exp(3)) - 3, rel=1e-6)


def test_predicted_clusters_follow_links():
    starts, ends = torch.tensor([0, 2, 5, 8]), torch.tensor([0, 3, 5, 9])
    antecedents = torch.tensor([[0, 0], [0, 0], [1, 0], [2, 1]])
    scores = torch.tensor(
        [[0.0, -1, -1], [0.0, 1.0, -1], [0.0, 2.0, 1.0], [0.0, 3.0, -5.0]]  # 1->0, 2->1, 3->2
    )
    assert predicted_clusters(starts, ends, antecedents, scores) == [[(0, 0), (2, 3), (5, 5), (8, 9)]]
    scores[2, 1:] = -10  # 2 starts nothing; 3 -> 2 opens a new cluster
    assert predicted_clusters(starts, ends, antecedents, scores) == [[(0, 0), (2, 3)], [(5, 5), (8, 9)]]


def test_without_overlaps_the_clusters_are_the_originals_where_no_mentions_overlap():
    generator = torch.Generator().manual_seed(0)
    for _ in range(50):
        k, c = 12, 5
        starts = torch.arange(k) * 3  # spans (3i, 3i + 1): none overlaps another
        antecedents = torch.randint(0, k, (k, c), generator=generator)
        scores = torch.randn(k, c + 1, generator=generator)
        scores[:, 0] = 0
        scores[:, 1:][antecedents >= torch.arange(k).unsqueeze(1)] = float("-inf")
        scores[0, 2] = scores[0, 1] = float("-inf")
        expected = predicted_clusters(starts, starts + 1, antecedents, scores)
        assert predicted_clusters(starts, starts + 1, antecedents, scores, overlapping=False) == expected


def test_without_overlaps_a_span_takes_the_best_antecedent_whose_cluster_it_does_not_overlap():
    """'Ada met Charles. He showed her his engine.': 'her' (5) joins Ada (0); 'her his' (5-6) prefers Ada too,
    whose cluster now holds 'her': it takes its next antecedent above the dummy, or none."""
    starts, ends = torch.tensor([0, 2, 4, 5, 5, 6]), torch.tensor([0, 2, 4, 5, 6, 6])
    antecedents = torch.tensor([[0, 0], [0, 0], [1, 0], [0, 1], [0, 1], [2, 1]])
    scores = torch.tensor(
        [[0.0, -9, -9], [0.0, -1, -9], [0.0, -1, -1], [0.0, 3, -1], [0.0, 4, 2], [0.0, 5, -1]]
    )  # her -> Ada; her his -> Ada (4) or Charles (2); his -> He
    assert predicted_clusters(starts, ends, antecedents, scores) == [[(0, 0), (5, 5), (5, 6)], [(4, 4), (6, 6)]]
    apart = predicted_clusters(starts, ends, antecedents, scores, overlapping=False)
    assert apart == [[(0, 0), (5, 5)], [(2, 2), (5, 6)], [(4, 4), (6, 6)]]
    scores[4, 2] = -1  # no other antecedent beats the dummy: 'her his' joins nothing
    assert predicted_clusters(starts, ends, antecedents, scores, overlapping=False) == [
        [(0, 0), (5, 5)],
        [(4, 4), (6, 6)],
    ]


def test_crop_keeps_whole_segments_and_shifts_gold():
    config = tiny_config()
    document = tiny_tensors(make_document(num_segments=5), config)
    window = crop(document, 2, 1)
    lengths = document.attention_mask.sum(1).tolist()
    start, stop = lengths[0], lengths[0] + lengths[1] + lengths[2]
    assert window.num_tokens == stop - start and window.token_offset == start
    inside = (document.gold_starts >= start) & (document.gold_ends < stop)
    assert window.gold_starts.tolist() == (document.gold_starts[inside] - start).tolist()
    assert window.segment_of_token.min() == 0 and window.segment_of_token.max() == 1
    draws = {random_crop(document, 2, torch.Generator().manual_seed(s)).token_offset for s in range(20)}
    assert len(draws) > 1  # different windows for different draws


def test_byte_dropout_rate_and_scaling():
    torch.manual_seed(0)
    dropout = Dropout(0.3).train()
    out = dropout(torch.ones(200_000))
    kept = out > 0
    assert abs(kept.float().mean().item() - (1 - 77 / 256)) < 0.005
    assert torch.allclose(out[kept], torch.tensor(256 / 179))
    assert torch.equal(dropout.eval()(torch.ones(5)), torch.ones(5))


def test_byte_dropout_gradient_is_the_mask_times_the_scale():
    torch.manual_seed(1)
    dropout = Dropout(0.3).train()
    inputs = torch.randn(40, 50, requires_grad=True)
    outputs = dropout(inputs)
    outputs.backward(torch.ones_like(outputs))
    kept = outputs.detach() != 0
    assert torch.equal(inputs.grad, kept.float() * (256 / 179))
    assert torch.equal(outputs.detach(), inputs.detach() * kept * (256 / 179))


@pytest.mark.parametrize("depth", [1, 2])
def test_ffnn_folds_the_last_dropout_scale_into_its_output_layer(depth):
    """from_first_layer applies the last dropout's scale after the output layer: the same values and
    gradients as dropout (mask times scale) on the hidden activations, under the same random draws."""
    ffnn = FFNN(12, 30, depth, 1, 0.3).train()
    pre = torch.randn(7, 5, 30, requires_grad=True)

    def direct(pre: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(pre)
        for layer in ffnn.hidden[1:]:
            hidden = torch.relu(layer(ffnn.dropout(hidden)))
        return ffnn.output(ffnn.dropout(hidden))

    torch.manual_seed(3)
    folded = ffnn.from_first_layer(pre)
    (folded_grad,) = torch.autograd.grad(folded.sum(), pre)
    torch.manual_seed(3)
    expected = direct(pre)
    (expected_grad,) = torch.autograd.grad(expected.sum(), pre)
    # The scale multiplies the sums instead of their terms: each layer after the first sums in other roundings.
    terms = ffnn_terms(ffnn)
    assert_reordered_close(folded, expected, terms)
    assert_reordered_close(folded_grad, expected_grad, terms)
    ffnn.eval()
    plain = ffnn.from_first_layer(pre)
    assert torch.equal(plain, direct(pre))  # no dropout: the plain network
    assert not torch.allclose(folded, plain)  # and in training the dropout did act


def test_config_rejects_unknown_keys_and_bad_values():
    with pytest.raises(ConfigError, match=r"unknown model key\(s\) \['ffnn_sise'\]"):
        BaselineConfig.from_dict({"ffnn_sise": 10})
    with pytest.raises(ConfigError, match="top_span_ratio"):
        BaselineConfig(top_span_ratio=0)
    assert BaselineConfig.from_dict(BaselineConfig().to_dict()) == BaselineConfig()


def test_bucket_distance_of_rank_offsets():
    assert bucket_distance(torch.tensor([[1, 6], [9, 70]])).tolist() == [[1, 5], [6, 9]]


def original_loss(output, document) -> tuple[torch.Tensor, torch.Tensor]:
    """The original antecedent loss of a forward pass, computed here, and the kept spans' gold cluster ids."""
    span_ids = span_cluster_ids(
        output.top_span_starts,
        output.top_span_ends,
        document.gold_starts,
        document.gold_ends,
        document.gold_cluster_ids,
    )
    loss = antecedent_loss(output.top_antecedent_scores, output.top_antecedents, output.top_antecedent_mask, span_ids)
    return loss, span_ids


def test_mention_loss_coef_0_gives_exactly_the_original_loss_and_a_coefficient_adds_the_mention_loss():
    document = tiny_tensors(make_document(num_segments=3), tiny_config())
    losses = {}
    for coef in (0.0, 0.5):
        torch.manual_seed(0)
        model = BaselineCorefModel(tiny_config(mention_loss_coef=coef), tiny_encoder(seed=4))
        model.eval()
        output = model(document)
        losses[coef] = (output.loss, original_loss(output, document)[0], mention_loss(output, document))
    loss, original, _ = losses[0.0]
    assert torch.equal(loss, original)
    loss, original, mentions = losses[0.5]
    assert torch.equal(losses[0.0][1], original)  # same weights, same antecedent loss
    assert mentions > 0 and torch.allclose(loss, original + 0.5 * mentions)
    with pytest.raises(ConfigError, match="model key 'mention_loss_coef' must be 0 or more, or auto, got -1.0"):
        tiny_config(mention_loss_coef=-1.0)


def test_a_mention_loss_over_the_top_spans_is_coref_hois_on_the_kept_spans():
    document = tiny_tensors(make_document(num_segments=3), tiny_config())
    found = {}
    for spans in ("candidates", "top"):
        torch.manual_seed(0)
        config = tiny_config(mention_loss_coef=0.5, mention_loss_spans=spans, top_span_ratio=0.9)
        model = BaselineCorefModel(config, tiny_encoder(seed=4))
        output = model.train()(document)
        found[spans] = output
    output = found["top"]
    original, span_ids = original_loss(output, document)
    scores = output.top_span_mention_scores  # [k]
    assert (span_ids > 0).any() and (span_ids == 0).any()
    expected = torch.nn.functional.softplus(torch.where(span_ids > 0, -scores, scores)).sum()
    torch.testing.assert_close(output.loss, original + 0.5 * expected)
    # Only the candidates' loss reads (and backpropagates through) every candidate's score.
    assert found["candidates"].candidate_mention_scores.requires_grad
    assert not output.candidate_mention_scores.requires_grad and scores.requires_grad
    # The same dropout draws: the same spans kept, and the loss over the candidates is another number.
    assert torch.equal(found["candidates"].top_span_starts, output.top_span_starts)
    assert not torch.allclose(found["candidates"].loss, output.loss)
    with pytest.raises(ConfigError, match="model key 'mention_loss_spans' must be one of"):
        tiny_config(mention_loss_spans="gold")


def test_the_mention_loss_labels_every_gold_mention_singletons_included():
    document = make_document(num_segments=2)
    in_clusters = {position for cluster in document["clusters"] for span in cluster for position in span}
    flat = [token for segment in document["sentences"] for token in segment]
    position = next(i for i, token in enumerate(flat) if token.startswith("w") and i not in in_clusters)
    singleton = [position, position]  # a one-word entity mentioned once
    document["clusters"] = [*document["clusters"], [singleton]]
    tensors = tiny_tensors(document, tiny_config())
    model = BaselineCorefModel(tiny_config(mention_loss_coef=1.0), tiny_encoder(seed=4))
    model.eval()
    output = model(tensors)
    scores = output.candidate_mention_scores.detach().clone().requires_grad_(True)
    output.candidate_mention_scores = scores
    mention_loss(output, tensors).backward()
    gold = {tuple(span) for cluster in document["clusters"] for span in cluster}
    candidates = list(zip(output.candidate_starts.tolist(), output.candidate_ends.tolist(), strict=True))
    pushed_up = {span for span, gradient in zip(candidates, scores.grad.tolist(), strict=True) if gradient < 0}
    assert tuple(singleton) in pushed_up
    assert pushed_up == gold & set(candidates)  # gold candidates pushed up, every other one down


def test_no_op_mixes_bf16_and_fp32_on_the_pair_tensors_under_bf16_autocast(model_and_document):
    """The [k, c, ffnn] pair tensors stay in bf16 under bf16 autocast, forward and backward.

    A bf16 + fp32 broadcast add on them takes a scalar path on a CPU, about 30x slower
    than the bf16 + bf16 add (docs/benchmarks.md); a cast of them is a wasted pass.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    model, document = model_and_document
    model.train()
    ffnn = model.config.ffnn_size
    mixed: list[str] = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            tensors = [a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
            dtypes = {t.dtype for t in tensors if t.is_floating_point()}
            big = [t for t in tensors if t.dim() >= 2 and t.shape[-1] == ffnn and t.numel() >= 3 * ffnn * 6]
            if big and {torch.bfloat16, torch.float32} <= dtypes:
                mixed.append(f"{func}: {[(tuple(t.shape), t.dtype) for t in tensors]}")
            return out

    with torch.autocast("cpu", dtype=torch.bfloat16), Record():
        output = model(document)
        output.loss.backward()
    assert output.top_antecedents.shape[0] >= 3  # the pair tensors are larger than the threshold above
    assert mixed == []


def _scores_with_min_coarse_score(model, document, value):
    model.config = dataclasses.replace(model.config, min_coarse_score=value)
    with torch.no_grad():
        return model(document)


def test_min_coarse_score_below_every_coarse_score_gives_the_same_scores(model_and_document):
    """The packed fine pass over the pairs kept by min_coarse_score computes what the full one does."""
    model, document = model_and_document
    full = _scores_with_min_coarse_score(model, document, None)
    packed = _scores_with_min_coarse_score(model, document, -1e9)
    # Packed rows are other GEMM shapes: the fine FFNN, then each refinement's attention over the antecedents
    # and the dummy and its gate over [g; attended], in other roundings.
    c = full.top_antecedents.shape[1]
    terms = ffnn_terms(model.pair_scorer.slow_antecedent_scores) + (c + 1 + model.gate.in_features)
    assert_reordered_close(packed.top_antecedent_scores, full.top_antecedent_scores, terms)


def test_min_coarse_score_leaves_out_the_pairs_at_or_below_it_and_keeps_the_others():
    """One round (coref_depth 1): the kept pairs score as without the floor, the others -inf.

    (With refinement the second round differs: the left-out pairs get no attention.)
    """
    config = tiny_config(coref_depth=1)
    model = BaselineCorefModel(config, tiny_encoder()).eval()
    document = tiny_tensors(make_document(num_segments=3), config)
    captured = {}
    top_antecedents = model.top_antecedents

    def capture(coarse):
        antecedents, mask, top_coarse = top_antecedents(coarse)
        captured["coarse"] = top_coarse  # [k, c]
        return antecedents, mask, top_coarse

    model.top_antecedents = capture
    full = _scores_with_min_coarse_score(model, document, None)
    coarse = captured["coarse"]
    floor = float(coarse[torch.isfinite(coarse)].median())
    pruned = _scores_with_min_coarse_score(model, document, floor)
    kept = coarse > floor  # [k, c]
    assert kept.any() and (torch.isfinite(coarse) & ~kept).any()  # the floor splits the real pairs
    # The kept pairs packed into other GEMM shapes: the fine FFNN in other roundings.
    assert_reordered_close(
        pruned.top_antecedent_scores[:, 1:][kept],
        full.top_antecedent_scores[:, 1:][kept],
        ffnn_terms(model.pair_scorer.slow_antecedent_scores),
    )
    assert torch.isneginf(pruned.top_antecedent_scores[:, 1:][~kept]).all()


def test_min_coarse_score_above_every_coarse_score_leaves_every_pair_out(model_and_document):
    """No pair above the floor (an untrained model early in a run): every antecedent -inf, the dummy 0, no
    crash, under bf16 autocast too; each span then starts a cluster of its own or none."""
    model, document = model_and_document
    for autocast in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            output = _scores_with_min_coarse_score(model, document, 1e9)
        assert output.top_antecedent_scores.shape[1] > 1
        assert torch.isneginf(output.top_antecedent_scores[:, 1:]).all()
        assert (output.top_antecedent_scores[:, 0] == 0).all()


def test_min_coarse_score_does_not_change_training(model_and_document):
    model, document = model_and_document
    model.train()
    torch.manual_seed(3)
    full = _scores_with_min_coarse_score(model, document, None)
    torch.manual_seed(3)
    with_floor = _scores_with_min_coarse_score(model, document, 1e9)
    torch.testing.assert_close(with_floor.loss, full.loss)
    assert torch.isfinite(with_floor.top_antecedent_scores[:, 1:][full.top_antecedent_mask]).all()


def test_an_already_encoded_document_gives_the_same_output(model_and_document):
    """The model's one call of its encoder (``encode``) can be skipped: the document's ``[num_subtokens, H]``,
    computed elsewhere (several documents in one pass), gives exactly the same output."""
    model, document = model_and_document
    with torch.no_grad():
        direct = model(document)
        given = model(document, hidden=model.encode(document))
    assert torch.equal(given.top_antecedent_scores, direct.top_antecedent_scores)
    assert torch.equal(given.top_antecedents, direct.top_antecedents) and torch.equal(given.loss, direct.loss)


def test_a_training_step_reads_the_device_back_a_few_times_whatever_the_spans(monkeypatch):
    """A training step (crop, forward, loss, backward, clipping, Adam) reads tensors back to the host a few
    times (each a synchronisation on a GPU), as many with twice the spans; the fused optimiser's CPU kernel's
    reads of its step counters (on a GPU they stay on the device) are not counted."""
    from coref_pipeline.models.config import TrainingConfig
    from coref_pipeline.training.engine import Engine
    from coref_pipeline.training.loop import training_step
    from coref_pipeline.training.optim import model_optimisers
    from tests.models.host_reads import counting_host_reads

    reads = {}
    for ratio in (0.2, 0.4):
        config = tiny_config(max_segment_len=48, top_span_ratio=ratio, dropout_rate=0.1)
        model = BaselineCorefModel(config, tiny_encoder(seed=2)).train()
        optimisers = model_optimisers(model, TrainingConfig(), total_steps=10)
        engine = Engine(TrainingConfig(device="cpu"))
        document = tiny_tensors(make_document(num_segments=5, seed=1, seg_len=48), config)
        generator = torch.Generator().manual_seed(0)
        training_step(model.training_losses, random_crop(document, 3, generator), optimisers, 1.0, engine)
        with counting_host_reads(monkeypatch) as counted:
            crop = random_crop(document, 3, generator)
            training_step(model.training_losses, crop, optimisers, 1.0, engine)
        reads[ratio] = counted.reads
    assert reads[0.4] == reads[0.2] <= 10


def test_overlapping_pairs_marks_each_earlier_span_that_holds_or_is_nested_in_a_later_one():
    from coref_pipeline.models.spans import overlapping_pairs

    spans = [(0, 0), (0, 2), (1, 1), (2, 4), (5, 5)]  # (start, end) order
    starts, ends = (torch.tensor(column) for column in zip(*spans, strict=True))
    expected = [[j < i and not (spans[j][1] < spans[i][0]) for j in range(5)] for i in range(5)]
    assert overlapping_pairs(starts, ends).tolist() == expected
    assert expected[1][0] and expected[2][1] and expected[3][1] and not expected[4][3]


@pytest.mark.parametrize("training", [False, True])
def test_without_overlapping_antecedents_no_span_takes_an_antecedent_that_overlaps_it(training):
    """overlapping_antecedents: false: every overlapping (span, antecedent) pair is masked and scores -inf, in
    training and at inference; a pair apart scores as with the original's rule (all antecedents kept: c >= k; one
    round: a second would refine over other antecedents)."""
    document = tiny_tensors(make_document(num_segments=3, seed=4), tiny_config())
    outputs = {}
    for overlapping in (True, False):
        config = tiny_config(
            overlapping_antecedents=overlapping, max_top_antecedents=1000, max_span_width=3, coref_depth=1
        )
        torch.manual_seed(0)
        model = BaselineCorefModel(config, tiny_encoder()).train(training)
        torch.manual_seed(1)
        outputs[overlapping] = model(document)
    apart, original = outputs[False], outputs[True]
    starts, ends = apart.top_span_starts, apart.top_span_ends
    antecedents = apart.top_antecedents
    overlap = ends[antecedents] >= starts.unsqueeze(1)  # [k, c]
    earlier = antecedents < torch.arange(antecedents.shape[0]).unsqueeze(1)
    assert (overlap & earlier).any()  # the document has such pairs
    assert not (apart.top_antecedent_mask & overlap).any()
    assert torch.isneginf(apart.top_antecedent_scores[:, 1:][overlap & earlier]).all()
    # every earlier span is a column (c >= k), in score order: compare the scores by (span, antecedent)
    k = antecedents.shape[0]
    by_pair = {}
    for name, output in (("apart", apart), ("original", original)):
        square = torch.full((k, k), float("-inf"))
        by_pair[name] = square.scatter(1, output.top_antecedents, output.top_antecedent_scores[:, 1:].detach())
    kept = torch.zeros(k, k, dtype=torch.bool).scatter(1, antecedents, earlier & ~overlap)
    torch.testing.assert_close(by_pair["apart"][kept], by_pair["original"][kept])
    assert torch.isfinite(apart.loss)
    clusters = predicted_clusters(starts, ends, antecedents, apart.top_antecedent_scores)
    links = apart.top_antecedent_scores.argmax(dim=1) - 1
    for index, choice in enumerate(links.tolist()):
        if choice >= 0:
            assert int(ends[antecedents[index, choice]]) < int(starts[index]), clusters


@pytest.mark.parametrize(
    "overrides",
    [{}, {"overlapping_antecedents": False}, {"coarse_to_fine": False}, {"min_coarse_score": 0.0}, {"coref_depth": 1}],
)
def test_a_group_of_documents_gives_each_its_own_output_within_the_float_bound(overrides):
    """``forward_group``: documents of other lengths, genres and speakers predicted together, each as ``forward``
    predicts it alone from the same encoder output: the same candidates, their mention scores within float32's bound
    (the products come in other shapes); the same kept spans but where two candidates' scores lie within that bound
    (pruning ranks them); then the same antecedents in its own positions but where a span's coarse scores lie that
    close (ranking them, or at the floor), their scores within the bound, the same clusters but at a near tie."""
    config = tiny_config(**overrides)
    model = BaselineCorefModel(config, tiny_encoder(seed=5))
    with torch.no_grad():  # weights spread so that the pairs score apart from the dummy and link
        for parameter in model.pair_scorer.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=torch.Generator().manual_seed(1)) * 0.3)
    model.eval()
    keys = ["nw/a_0", "bc/b_0", "tc/c_0", "wb/d_0", "pt/e_0"]
    documents = [
        tiny_tensors(make_document(key, seed=seed, num_segments=segments), config)
        for seed, (key, segments) in enumerate(zip(keys, [3, 1, 2, 1, 3], strict=True))
    ]
    assert len({document.genre for document in documents}) == len(documents)
    terms, linked = head_terms(model), 0
    with torch.no_grad():
        hidden = [model.encode(document) for document in documents]
        together = model.forward_group(documents, hidden)
        for document, encoded, output in zip(documents, hidden, together, strict=True):
            with recorded_coarse_scores(model) as coarse:
                alone = model(document, with_loss=False, hidden=encoded)
            for name in ("candidate_starts", "candidate_ends"):
                assert torch.equal(getattr(output, name), getattr(alone, name)), name
            assert_reordered_close(output.candidate_mention_scores, alone.candidate_mention_scores, terms)
            floor, key = config.min_coarse_score, document.doc_key
            if not same_baseline_decisions_or_near_tie(output, alone, coarse[0], floor, terms, key):
                continue  # a near tie in the mention ranking or a span's antecedents tipped: what reads them differs
            assert_reordered_close(output.top_span_emb, alone.top_span_emb, terms)
            assert_reordered_close(output.top_antecedent_scores, alone.top_antecedent_scores, terms)
            clusters = [
                predicted_clusters(
                    result.top_span_starts,
                    result.top_span_ends,
                    result.top_antecedents,
                    result.top_antecedent_scores,
                    config.overlapping_antecedents,
                )
                for result in (output, alone)
            ]
            assert clusters[0] == clusters[1] or near_tie(alone.top_antecedent_scores, terms)
            linked += len(clusters[1])
    assert linked  # decisions to see


def test_a_group_is_predicted_in_evaluation_mode_only(model_and_document):
    model, document = model_and_document
    model.train()
    with pytest.raises(RuntimeError, match="evaluation mode"):
        model.forward_group([document, document], [model.encode(document)] * 2)
