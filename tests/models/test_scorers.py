"""The scorers shared by both models: the pair scorer's first layer under mixed precision, the span scorer's pruning."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch

from coref_pipeline.models import scorers
from coref_pipeline.models.baseline import BaselineCorefModel
from coref_pipeline.models.config import IncrementalConfig
from coref_pipeline.models.incremental import IncrementalCorefModel, PairFeatures
from coref_pipeline.models.scorers import FirstLayerParts, PairScorer
from coref_pipeline.models.spans import candidate_spans
from tests.models.tiny import make_document, tiny_config, tiny_encoder, tiny_tensors
from tests.tolerances import assert_gradients_reordered_close, assert_reordered_close, ffnn_terms, is_softmax_shift


def test_without_a_gradient_the_first_layer_parts_share_one_copy_made_once():
    """Prediction (no gradient): the parts in bf16 are views of the weight's one bf16 copy (``cast_once``), the values
    of each part cast, made once however many segments ask for them."""
    scorer = BaselineCorefModel(tiny_config(), tiny_encoder(seed=1)).pair_scorer
    weight = scorer.slow_antecedent_scores.hidden[0].weight
    with torch.no_grad():
        first, second = scorer.first_layer_parts(torch.bfloat16), scorer.first_layer_parts(torch.bfloat16)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            under_autocast = scorer.first_layer_parts()
    d = scorer.span_dim
    views = weight.detach().split([d, d, d, scorer.feature_size], dim=1)
    for parts in (first, second, under_autocast):
        found = [parts.target, parts.candidate, *parts.products, parts.features]
        assert all(torch.equal(part, view.bfloat16()) for part, view in zip(found, views, strict=True))
    assert first.target.untyped_storage().data_ptr() == second.candidate.untyped_storage().data_ptr()
    assert under_autocast.target.untyped_storage().data_ptr() == first.target.untyped_storage().data_ptr()


def test_the_pair_scorers_first_layer_parts_are_cast_once_under_autocast_with_the_same_scores_and_gradients():
    torch.manual_seed(0)
    scorer = BaselineCorefModel(tiny_config(), tiny_encoder(seed=1)).pair_scorer
    weight = scorer.slow_antecedent_scores.hidden[0].weight
    d = scorer.span_dim
    targets, candidates = torch.randn(3, d), torch.randn(5, d)
    index = torch.tensor([[0, 1, 2], [1, 2, 3], [2, 3, 4]])
    features = torch.randn(3, 3, scorer.feature_size)

    def tensors(parts: FirstLayerParts) -> list[torch.Tensor]:
        return [parts.target, parts.candidate, *parts.products, parts.features]

    assert all(part.dtype == torch.float32 for part in tensors(scorer.first_layer_parts()))  # no autocast: as stored
    results = []
    for parts in ("cast once", "views"):  # views: each matmul casts its part, as autocast does unasked
        scorer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            if parts == "cast once":
                split = scorer.first_layer_parts()
                assert all(part.dtype == torch.bfloat16 for part in tensors(split))
            else:
                views = weight.split([d, d, d, scorer.feature_size], dim=1)
                split = FirstLayerParts(views[0], views[1], (views[2],), views[3])
            scores = scorer.scores(targets, candidates, index, features, parts=split)  # [3, 3]
        scores.sum().backward()
        results.append((scores.detach(), weight.grad.clone()))
    (once, once_grad), (views, views_grad) = results
    assert torch.equal(once, views)
    assert torch.equal(once_grad, views_grad) and once_grad.abs().sum() > 0


def test_the_pair_scorer_computes_in_the_inference_dtype_only_without_a_graph_or_an_autocast_of_the_caller():
    """``computing_in(bf16)`` (CPU inference with native bf16): ``scores`` computes as under the caller's own bf16
    autocast, returns float32, and leaves a computation that records a graph (training) as it was."""
    torch.manual_seed(0)
    scorer = BaselineCorefModel(tiny_config(), tiny_encoder(seed=1)).pair_scorer.eval()
    d = scorer.span_dim
    targets, candidates = torch.randn(3, d), torch.randn(5, d)
    index = torch.tensor([[0, 1, 2], [1, 2, 3], [2, 3, 4]])
    features = torch.randn(3, 3, scorer.feature_size)
    with torch.no_grad():
        fp32 = scorer.scores(targets, candidates, index, features)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = scorer.scores(targets, candidates, index, features)
        with scorer.computing_in(torch.bfloat16):
            ours = scorer.scores(targets, candidates, index, features)
            with torch.autocast("cpu", dtype=torch.bfloat16):  # the caller's autocast: computed as it asks
                assert torch.equal(scorer.scores(targets, candidates, index, features), bf16)
        # scores_where casts each target's rows to bf16 before gathering them per pair: the values of gathering
        # the fp32 rows, which scores then casts
        scored = torch.tensor([[True, False, True], [False, True, True], [True, True, False]])
        with scorer.computing_in(torch.bfloat16):
            where = scorer.scores_where(scored, targets, candidates, index, features)
            assert scorer.scoring_dtype(targets) == torch.bfloat16
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(scorer, "scoring_dtype", lambda like: like.dtype)
                packed = scorer.scores_where(scored, targets, candidates, index, features)
        assert scorer.scoring_dtype(targets) == torch.float32
    assert scorer.inference_dtype is None  # restored
    assert ours.dtype == torch.float32 and torch.equal(ours, bf16) and not torch.equal(ours, fp32)
    assert torch.equal(where, packed) and bool((where[~scored] == float("-inf")).all())
    with scorer.computing_in(torch.bfloat16):
        recorded = scorer.scores(targets, candidates, index, features)  # a graph: not switched
    assert recorded.requires_grad and torch.equal(recorded.detach(), fp32)


@pytest.mark.parametrize("depth", [1, 2])
def test_top_spans_in_training_scores_the_kept_spans_again_with_the_candidates_dropout_masks(depth):
    """Without a loss on every candidate, the candidates are scored without a graph and the kept spans again:
    the same kept spans, scores and gradients as one pass with a graph over every candidate."""
    torch.manual_seed(0)
    scorer = BaselineCorefModel(tiny_config(dropout_rate=0.3, ffnn_depth=depth), tiny_encoder(seed=1)).span_scorer
    scorer.train()
    hidden_values = torch.randn(40, 32)
    sentence_map = torch.tensor([0] * 15 + [1] * 25)
    starts, ends = candidate_spans(sentence_map, 5)
    weights = torch.randn(12)
    found = {}
    for one_pass in (True, False):
        scorer.zero_grad()
        hidden = hidden_values.clone().requires_grad_(True)  # a fine-tuned encoder's output
        torch.manual_seed(7)  # the same dropout draws
        top = scorer.top_spans(hidden, starts, ends, 12, candidate_gradients=one_pass)
        (top.scores * weights).sum().backward()
        gradients = {name: p.grad.clone() for name, p in scorer.named_parameters() if p.grad is not None}
        found[one_pass] = (top, hidden.grad, gradients)
    (whole, whole_hidden, whole_gradients), (split, split_hidden, split_gradients) = found[True], found[False]
    assert whole.candidate_scores.requires_grad and not split.candidate_scores.requires_grad
    assert torch.equal(whole.kept, split.kept) and whole.kept.numel() == 12
    # The same function on the same shapes, with and without a graph: the same roundings.
    assert torch.equal(split.candidate_scores, whole.candidate_scores.detach())
    assert torch.equal(split.embeddings, whole.embeddings)
    # The kept spans scored from g against the rearranged candidate form: the mention FFNN's first layer sums
    # its span_dim inputs in other groups, then its hidden layers; the backward pass sums over the kept spans
    # in one form and over every candidate in the other.
    terms = scorer.span_dim + depth * scorer.config.ffnn_size + starts.numel()
    assert_reordered_close(split.scores, whole.scores, terms)
    assert_reordered_close(split_hidden, whole_hidden, terms)
    assert "mention_scores.hidden.0.weight" in split_gradients
    assert_gradients_reordered_close(split_gradients, whole_gradients, terms)
    # The masks matter: without dropout the kept spans score otherwise.
    with torch.no_grad():
        undropped = scorer.eval().top_spans(hidden_values, starts, ends, 12, candidate_gradients=False)
    assert not torch.allclose(undropped.candidate_scores, whole.candidate_scores.detach())


def test_without_autograd_top_spans_takes_the_kept_spans_scores_from_the_candidates():
    torch.manual_seed(0)
    scorer = BaselineCorefModel(tiny_config(), tiny_encoder(seed=1)).span_scorer.eval()
    starts, ends = candidate_spans(torch.zeros(30, dtype=torch.long), 4)
    with torch.no_grad():
        top = scorer.top_spans(torch.randn(30, 32), starts, ends, 8, candidate_gradients=False)
    assert torch.equal(top.scores, top.candidate_scores[top.kept])


def test_fixed_columns_split_the_product_gemm_with_the_same_scores_and_parameter_gradients():
    """A frozen encoder's h_start and h_end take no gradient: the split GEMM gives the same scores and
    parameter gradients, and the gradient of the other columns of g."""
    torch.manual_seed(0)
    config = tiny_config()
    found = {}
    for fixed in (0, 64):  # 2 x the tiny encoder's hidden size
        torch.manual_seed(0)
        scorer = PairScorer(config, 3 * 32 + config.feature_size, fixed_columns=fixed)
        torch.manual_seed(1)
        frozen = torch.randn(7, 64)  # no gradient: an encoder's output
        learned = torch.randn(7, scorer.span_dim - 64, requires_grad=True)  # width and head parts
        spans = torch.cat([frozen, learned], dim=1)  # g [7, D]
        index = torch.tensor([[0, 1, 2], [1, 2, 3], [4, 5, 6]])
        scores = scorer.scores(spans[:3], spans, index, torch.randn(3, 3, scorer.feature_size))  # [3, 3]
        (scores * torch.arange(9.0).view(3, 3)).sum().backward()
        gradients = {name: p.grad.clone() for name, p in scorer.named_parameters() if p.grad is not None}
        found[fixed] = (scores.detach(), learned.grad.clone(), gradients)
    (scores, learned_grad, gradients), (split_scores, split_learned_grad, split_gradients) = found[0], found[64]
    # The split GEMM sums the first layer's inputs in two groups: its input width, then the output layer.
    first = scorer.slow_antecedent_scores.hidden[0]
    terms = first.in_features + first.out_features
    assert_reordered_close(split_scores, scores, terms)
    assert_reordered_close(split_learned_grad, learned_grad, terms)
    assert "slow_antecedent_scores.hidden.0.weight" in gradients
    assert_gradients_reordered_close(split_gradients, gradients, terms)


@pytest.mark.parametrize(
    "values",
    [dict(), dict(use_metadata=False), dict(use_features=False, use_segment_distance=False), dict(genres=["nw"])],
)
@pytest.mark.parametrize("speakers", [True, False])
def test_the_feature_table_gives_phi_as_the_features_do_with_the_same_dropout_and_gradients(values, speakers):
    """The incremental model's passes look phi up in one table of every feature's embeddings: the same values
    (the same dropout draws), and the embeddings' gradients summed in another order."""
    config = tiny_config(dropout_rate=0.3, max_training_sentences=3, **values)
    scorer = PairScorer(config, 3 * 32 + config.feature_size).train()
    generator = torch.Generator().manual_seed(3)
    count = 40
    indices = torch.stack(
        [
            torch.randint(0, 2, (count,), generator=generator),  # same speaker
            torch.randint(0, 10, (count,), generator=generator),  # distance bucket
            torch.randint(0, 3, (count,), generator=generator),  # segment distance
        ]
    )  # [3, P]
    genre = len(config.genres) - 1
    weights = torch.randn(count, 1, scorer.feature_size, generator=generator)
    found = []
    for table in (False, True):
        scorer.zero_grad()
        torch.manual_seed(11)  # the same dropout draws
        if table:
            features = PairFeatures(genre, torch.zeros(1) if speakers else None)
            feature_table = scorer.feature_table(speakers)
            rows = torch.as_tensor(features.table_rows(feature_table, indices.numpy()))  # [features used, P]
            phi = scorer.table_features(feature_table, rows.T)
        else:
            same_speaker = indices[0].unsqueeze(1).bool() if speakers else None
            phi = scorer.features(same_speaker, genre, indices[1].unsqueeze(1), indices[2].unsqueeze(1))
        (phi * weights).sum().backward()
        gradients = {name: p.grad.clone() for name, p in scorer.named_parameters() if p.grad is not None}
        found.append((phi.detach(), gradients))
    (expected, expected_gradients), (phi, gradients) = found
    assert phi.shape == (count, 1, scorer.feature_size)
    assert torch.equal(phi, expected)
    assert gradients.keys() == expected_gradients.keys() and gradients
    assert_gradients_reordered_close(gradients, expected_gradients, count)


@pytest.mark.parametrize(
    ("values", "fixed"),
    [
        (dict(entity_representation=False, recent_mentions=2), 64),
        (dict(update="mean"), 64),
        (dict(), 0),  # a learned update mixes h_start and h_end into the representations scored
        (dict(entity_representation=False, recent_mentions=2, finetune_encoder=True), 0),
    ],
)
def test_the_incremental_model_fixes_the_columns_of_a_frozen_encoder_no_learned_weight_mixes(values, fixed):
    baseline = tiny_config()
    config = IncrementalConfig.from_baseline(baseline, values)
    model = IncrementalCorefModel(config, tiny_encoder(seed=1))
    assert model.pair_scorer.fixed_columns == fixed


def float64_losses(model: torch.nn.Module, document) -> list[float]:
    """The model's training losses on ``document`` in float64, each backpropagated (dropout 0: no draw)."""
    losses = []
    for loss in model.training_losses(document):
        loss.backward()
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize("model_type", ["baseline", "incremental"])
def test_only_the_softmax_shifts_have_a_zero_exact_gradient_and_their_values_change_nothing(model_type):
    """What lets the tolerances (tests/tolerances.py) compare SOFTMAX_SHIFTS by what they mean, not to the bit.

    In float64 (eps 2.2e-16) the gradient of each is rounding noise, where every other trained parameter's
    is of the order of the loss's; and the losses are the same with each shifted by 1. Another bias, shifted
    alike, changes them: the comparison can tell."""
    torch.manual_seed(0)
    config = tiny_config(dropout_rate=0.0)
    document = tiny_tensors(make_document(num_segments=3), config)
    if model_type == "baseline":
        model = BaselineCorefModel(config, tiny_encoder(seed=1, dropout=0.0))
    else:
        incremental = IncrementalConfig.from_baseline(config, {"dropout_rate": 0.0, "finetune_encoder": True})
        model = IncrementalCorefModel(incremental, tiny_encoder(seed=1, dropout=0.0))
    model = model.double().train()
    losses = float64_losses(model, document)
    # The losses sum a few thousand products (pairs of spans, layer widths): 1e4 * eps64 of their scale.
    gradients = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    rounding = 1e4 * torch.finfo(torch.float64).eps * max(float(g.abs().max()) for g in gradients.values())
    zero = sorted(name for name, gradient in gradients.items() if float(gradient.abs().max()) <= rounding)
    assert zero == sorted(name for name in gradients if is_softmax_shift(name))
    assert "span_scorer.mention_word_attn.bias" in zero and any("key.bias" in name for name in zero)

    def shifted(names: list[str]) -> list[float]:
        with torch.no_grad():
            for name in names:
                model.get_parameter(name).add_(1.0)
        try:
            return float64_losses(model, document)
        finally:
            with torch.no_grad():
                for name in names:
                    model.get_parameter(name).sub_(1.0)

    loss_rounding = 1e4 * torch.finfo(torch.float64).eps
    assert shifted(zero) == pytest.approx(losses, rel=loss_rounding)
    assert shifted(["span_scorer.mention_scores.output.bias"]) != pytest.approx(losses, rel=1e-3)


@pytest.mark.parametrize("model_heads", [True, False])
def test_candidate_scores_without_a_graph_add_in_place_to_the_same_bits(model_heads):
    # Without autograd the width and head parts accumulate onto the first layer in place; the scores are those of
    # the out-of-place sums a graph needs, bit for bit (what `predict --precision 32` computed before).
    torch.manual_seed(0)
    scorer = BaselineCorefModel(tiny_config(model_heads=model_heads), tiny_encoder(seed=1)).span_scorer.eval()
    starts, ends = candidate_spans(torch.zeros(40, dtype=torch.long), 5)
    hidden = torch.randn(40, 32)
    widths = scorer.width_features(starts, ends)
    with torch.no_grad():
        in_place = scorer.score_candidates(hidden, starts, ends, widths)
    with torch.enable_grad():
        graph = scorer.score_candidates(hidden.requires_grad_(), starts, ends, widths)
    assert graph.requires_grad and torch.equal(in_place, graph.detach())


def rows_alike_in_slices(scorer, count: int, bounds: list[int]) -> bool:
    """Whether this CPU's BLAS computes each row of the candidate pass's products (the width part's ``addmm`` onto
    the first layer, the mention FFNN's layers) the same in a GEMM of a slice's rows (``bounds``) as in one of all
    ``count``: what slicing keeps the bits by. The arithmetic guarantees only the reordered sums' bound; every CPU
    measured computes them alike."""
    generator = torch.Generator().manual_seed(0)
    layers = [scorer.mention_scores.hidden[0], *scorer.mention_scores.hidden[1:], scorer.mention_scores.output]
    for layer in layers:
        rows = torch.randn(count, layer.in_features, generator=generator)
        onto = torch.randn(count, layer.out_features, generator=generator)
        whole = [torch.nn.functional.linear(rows, layer.weight), torch.addmm(onto, rows, layer.weight.T)]
        parts = [
            torch.cat([torch.nn.functional.linear(rows[a:b], layer.weight) for a, b in pairwise(bounds)]),
            torch.cat([torch.addmm(onto[a:b], rows[a:b], layer.weight.T) for a, b in pairwise(bounds)]),
        ]
        if not all(torch.equal(one, sliced) for one, sliced in zip(whole, parts, strict=True)):
            return False
    return True


@pytest.mark.parametrize("model_heads", [True, False])
def test_candidate_scores_in_slices_are_the_bits_of_one_pass_with_or_without_dropout(model_heads, monkeypatch):
    # On a CPU without a graph the candidates are scored a slice at a time (CANDIDATE_SLICE rows, the last slice
    # taking the remainder), the dropout masks sliced with them: the scores of one pass over every candidate, bit
    # for bit where the BLAS computes a row alike in GEMMs of both lengths (every CPU measured; else within the
    # reordered sums' bound), spans whose attention weights underflow included; with training's masks the unsliced
    # pass's.
    torch.manual_seed(0)
    config = tiny_config(model_heads=model_heads, dropout_rate=0.3)
    scorer = BaselineCorefModel(config, tiny_encoder(seed=1)).span_scorer
    sentence_map = torch.randint(0, 12, (400,)).sort().values
    starts, ends = candidate_spans(sentence_map, 5)
    hidden = torch.randn(400, 32)
    attention = scorer.mention_word_attn.weight[0].detach()
    hidden[[7, 333]] += 500.0 * attention / attention.norm() ** 2  # logits 500 nats above their neighbours': the
    # spans beside them, in their blocks of the table, underflow there and are computed explicitly
    monkeypatch.setattr(scorers, "CANDIDATE_SLICE", 256)
    assert starts.numel() > 4 * 256 and starts.numel() % 256  # seven slices, the last one longer
    scorer.eval()
    widths = scorer.width_features(starts, ends)
    with torch.enable_grad():
        one_pass = scorer.score_candidates(hidden.clone().requires_grad_(), starts, ends, widths).detach()
    with torch.no_grad():
        sliced = scorer.score_candidates(hidden, starts, ends, widths)
    count = starts.numel()
    bounds = [index * 256 for index in range(count // 256)] + [count]
    alike = rows_alike_in_slices(scorer, count, bounds)
    terms = ffnn_terms(scorer.mention_scores) + 2 * scorer.span_dim
    assert_reordered_close(sliced, one_pass, terms)
    assert torch.equal(sliced, one_pass) or not alike
    scorer.train()  # training's candidate pass: masks drawn for every candidate, sliced with them
    masks = scorer.mention_scores.keep_masks(starts.numel(), hidden.device)
    assert masks and not masks[0].all()
    with torch.no_grad():
        prior = scorer.width_prior()  # its dropout drawn once, as candidate_scores draws it
        sliced = scorer.score_candidates(hidden, starts, ends, widths, masks, prior)
        monkeypatch.setattr(scorers, "CANDIDATE_SLICE", starts.numel())
        whole = scorer.score_candidates(hidden, starts, ends, widths, masks, prior)
    assert not torch.equal(sliced, one_pass)  # the masks were read
    assert_reordered_close(sliced, whole, terms)
    assert torch.equal(sliced, whole) or not alike
