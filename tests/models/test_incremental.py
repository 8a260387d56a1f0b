"""The incremental model: initialisation from the baseline, decisions, eviction, gold targets, memory."""

from __future__ import annotations

import warnings
from dataclasses import replace

import pytest
import torch

import coref_pipeline.models.incremental as incremental_module
from coref_pipeline.models.baseline import BaselineCorefModel, predicted_clusters
from coref_pipeline.models.config import ConfigError, IncrementalConfig
from coref_pipeline.models.incremental import (
    EntityMemory,
    GoldAntecedents,
    IncrementalCorefModel,
    PairFeatures,
    copy_baseline_weights,
)
from coref_pipeline.models.spans import bucket_distance
from tests.models.tiny import make_document, tiny_config, tiny_encoder, tiny_tensors
from tests.tolerances import assert_gradients_reordered_close, assert_reordered_close, ffnn_terms


def incremental_config(**overrides) -> IncrementalConfig:
    baseline = tiny_config().to_dict()
    return IncrementalConfig.from_baseline(baseline, {"dropout_rate": 0.0, **overrides})


def test_initialisation_copies_the_baseline_scorers_exactly():
    torch.manual_seed(1)
    baseline = BaselineCorefModel(tiny_config(), tiny_encoder(seed=1))
    torch.manual_seed(2)  # a different random start, so equal tensors mean copied ones
    model = IncrementalCorefModel(incremental_config(), tiny_encoder(seed=2))
    alpha_before = {k: v.clone() for k, v in model.alpha.state_dict().items()}
    copied = copy_baseline_weights(model, baseline.state_dict())
    source = baseline.state_dict()
    copied_prefixes = ("encoder.", "span_scorer.", "pair_scorer.", "src_projection.")  # the last: score calibrated
    expected = [n for n in model.state_dict() if n.startswith(copied_prefixes)]
    assert sorted(copied) == sorted(expected)
    for prefix in ("span_scorer.", "pair_scorer.", "src_projection."):
        names = [n for n in expected if n.startswith(prefix)]
        assert names, prefix
        for name in names:
            assert torch.equal(model.state_dict()[name], source[name]), name
    assert any(n.startswith("span_scorer.mention_scores.") for n in copied)
    assert "pair_scorer.slow_antecedent_scores.hidden.0.weight" in copied
    # The update network is new: untouched by the copy.
    for name, tensor in model.alpha.state_dict().items():
        assert torch.equal(tensor, alpha_before[name])


def test_a_baseline_of_other_sizes_is_a_clear_error():
    baseline = tiny_config(ffnn_size=24).to_dict()
    with pytest.raises(ConfigError, match=r"ffnn_size: baseline 24, configured 40"):
        IncrementalConfig.from_baseline(baseline, {"ffnn_size": 40})
    model = IncrementalCorefModel(incremental_config(ffnn_size=24), tiny_encoder())
    other = BaselineCorefModel(tiny_config(ffnn_size=40), tiny_encoder())
    with pytest.raises(ValueError, match=r"pair_scorer\.slow_antecedent_scores\.hidden\.0\.weight: baseline \(40, "):
        copy_baseline_weights(model, other.state_dict())
    with pytest.raises(ConfigError, match="unknown incremental model key"):
        IncrementalConfig.from_baseline(baseline, {"treshold": 1.0})


def test_pair_scores_are_the_fine_ffnn_over_mention_entity_product_and_features():
    torch.manual_seed(0)
    model = IncrementalCorefModel(incremental_config(score="paper"), tiny_encoder()).eval()
    d = model.span_dim
    memory = EntityMemory()
    for start in (0, 7, 30):
        embedding = torch.randn(d)
        memory.add(
            embedding, model.pair_scorer.project_candidates(embedding[None])[0], (start, start), torch.tensor(0.0)
        )
    memory.consolidate()
    mention = torch.randn(d)
    with torch.no_grad():
        fast = model.pair_scores(memory, mention, (40, 40), PairFeatures(2))
        entities = memory.base_embeddings  # [3, D]
        distance = bucket_distance(torch.tensor([40, 33, 10]))
        scorer = model.pair_scorer
        features = torch.cat(
            [
                torch.zeros(3, model.config.feature_size),  # no speaker for entities
                scorer.genre_embeddings.weight[2].expand(3, -1),
                scorer.antecedent_distance_emb(distance),
                scorer.segment_distance_embeddings(torch.zeros(3, dtype=torch.long)),
            ],
            dim=1,
        )
        pair = torch.cat([mention.expand(3, -1), entities, mention * entities, features], dim=1)
        direct = scorer.slow_antecedent_scores(pair).squeeze(1)
    # The first layer's pair inputs summed in other groups (mention, entities, products), then the FFNN.
    assert_reordered_close(fast, direct, ffnn_terms(scorer.slow_antecedent_scores))


def fixed_alpha(model: IncrementalCorefModel, alpha: float) -> None:
    """Make the update network output a constant: a = sigmoid(logit(alpha))."""
    with torch.no_grad():
        model.alpha.output.weight.zero_()
        model.alpha.output.bias.fill_(torch.logit(torch.tensor(alpha)).item())


def cosine_scores(memory: EntityMemory, mention: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """A hand-built PAIRSCORE: 10 cos(m, e) - 5 (attach when alike), superseded columns -inf."""
    columns = []
    for row in range(len(memory.base_ids)):
        if row in memory.superseded:
            columns.append(torch.tensor(float("-inf")))
        else:
            columns.append(10 * torch.cosine_similarity(mention, memory.base_embeddings[row], dim=0) - 5)
    for embedding in memory.fresh_embeddings:
        columns.append(10 * torch.cosine_similarity(mention, embedding, dim=0) - 5)
    return torch.stack(columns)


def test_greedy_decisions_on_a_hand_built_case(monkeypatch):
    model = IncrementalCorefModel(
        incremental_config(evict_distance=10**9, evict_singleton_distance=10**9), tiny_encoder()
    )
    model.eval()
    fixed_alpha(model, 0.25)
    monkeypatch.setattr(model, "pair_scores", cosine_scores)
    d = model.span_dim
    a, b, c = torch.zeros(d), torch.zeros(d), torch.zeros(d)
    a[0], b[1], c[2] = 1.0, 1.0, 1.0
    a_variant = a.clone()
    a_variant[3] = 0.5  # cos(a, a_variant) = 0.89: attaches to a
    spans = [(0, 0), (2, 3), (5, 5), (7, 7), (9, 10), (12, 12)]
    embeddings = torch.stack([a, b, a_variant, c, b, a])  # [6, D]
    memory = EntityMemory()
    with torch.no_grad():
        # Two "segments": the second starts from consolidated (base) entities.
        model.resolve_spans(memory, [0, 2, 5], [0, 3, 5], embeddings[:3], torch.zeros(3), PairFeatures(0))
        memory.consolidate()
        model.resolve_spans(memory, [7, 9, 12], [7, 10, 12], embeddings[3:], torch.zeros(3), PairFeatures(0))
    assert memory.clusters() == [[(0, 0), (5, 5), (12, 12)], [(2, 3), (9, 10)]]
    assert len(memory.mentions) == 3  # a, b, c; c stays a singleton (not in the output)
    # e <- a e + (1 - a) m with a = 0.25: a then a_variant then a.
    expected = 0.25 * (0.25 * a + 0.75 * a_variant) + 0.75 * a
    entity, _ = memory.embedding(memory.entity_of_span[(0, 0)])
    torch.testing.assert_close(entity, expected)
    # The threshold decides new entities: above every score, nothing attaches.
    high = IncrementalCorefModel(incremental_config(threshold=100.0), tiny_encoder()).eval()
    monkeypatch.setattr(high, "pair_scores", cosine_scores)
    memory = EntityMemory()
    with torch.no_grad():
        high.resolve_spans(
            memory, [s for s, _ in spans], [e for _, e in spans], embeddings, torch.zeros(6), PairFeatures(0)
        )
    assert memory.clusters() == []


def test_mean_update_is_the_running_mean():
    model = IncrementalCorefModel(incremental_config(update="mean"), tiny_encoder())
    assert model.update_weight(torch.zeros(3), torch.zeros(3), size=1) == pytest.approx(0.5)
    assert model.update_weight(torch.zeros(3), torch.zeros(3), size=3) == pytest.approx(0.75)


def memory_with(entities: list[tuple[int, int]]) -> EntityMemory:
    """Entities given as (last mention start, number of mentions)."""
    memory = EntityMemory()
    for index, (last, size) in enumerate(entities):
        spans = [(last - (size - 1 - k), last - (size - 1 - k)) for k in range(size)]  # the last is (last, last)
        entity_id = memory.add(torch.full((4,), float(index)), torch.zeros(2), spans[0], torch.tensor(0.0))
        for span in spans[1:]:
            memory.update(entity_id, torch.full((4,), float(index)), torch.zeros(2), span, torch.tensor(0.0))
    memory.consolidate()
    return memory


def test_eviction_removes_exactly_the_entities_the_policy_names():
    # position 2000: singletons more than 600 behind go, any entity more than 1200 behind goes.
    entities = [(1500, 1), (1399, 1), (1401, 1), (900, 3), (799, 3), (801, 2), (1990, 1)]
    memory = memory_with(entities)
    gone = memory.evict(2000, singleton_distance=600, distance=1200)
    assert sorted(gone) == [1, 4]  # 601 behind with one mention; 1201 behind with three
    assert memory.base_ids == [0, 2, 3, 5, 6]
    assert memory.base_embeddings[:, 0].tolist() == [0.0, 2.0, 3.0, 5.0, 6.0]
    # Evicted entities keep their mentions for the output.
    assert len(memory.mentions[4]) == 3 and 4 in memory.evicted and 4 not in memory.active
    # null switches a rule off.
    memory = memory_with(entities)
    assert memory.evict(2000, singleton_distance=None, distance=None) == []
    memory = memory_with(entities)
    assert sorted(memory.evict(2000, singleton_distance=None, distance=1200)) == [4]


def test_eviction_distance_is_measured_from_the_midpoint_of_the_most_recent_mention():
    memory = EntityMemory()
    for span in ((1390, 1410), (1380, 1400)):  # midpoints 1400 and 1390
        memory.add(torch.zeros(4), torch.zeros(2), span, torch.tensor(0.0))
    memory.consolidate()
    # At 2000 with 600: the first is 600 behind (stays, though its start is 610 behind), the second 610.
    assert memory.evict(2000, singleton_distance=600, distance=None) == [1]


def test_no_eviction_in_training_with_evict_in_training_false():
    document = tiny_tensors(make_document(num_segments=3), tiny_config())
    kept_all = {}
    for evict_in_training in (True, False):
        config = incremental_config(evict_singleton_distance=0, evict_distance=0, evict_in_training=evict_in_training)
        model = IncrementalCorefModel(config, tiny_encoder()).train()
        reader = model.read_segments(document, train=True)
        while True:
            try:
                next(reader).backward()
            except StopIteration as finished:
                kept_all[evict_in_training] = finished.value.memory
                break
    assert kept_all[True].evicted and not kept_all[False].evicted
    assert len(kept_all[False].active) == len(kept_all[False].mentions)
    # At inference the policy applies whatever evict_in_training says.
    model = IncrementalCorefModel(incremental_config(evict_distance=0, evict_in_training=False), tiny_encoder()).eval()
    with torch.no_grad():
        assert model(document).memory.evicted


def test_min_mention_score_keeps_unlikely_spans_from_starting_entities():
    for minimum, expected_entities in ((None, 3), (0.0, 1)):
        model = IncrementalCorefModel(
            incremental_config(threshold=1e9, min_mention_score=minimum), tiny_encoder()
        ).eval()  # the threshold makes every span a new entity unless refused
        mentions = torch.randn(3, model.span_dim)
        memory = EntityMemory()
        with torch.no_grad():
            model.resolve_spans(
                memory, [0, 2, 4], [0, 2, 4], mentions, torch.tensor([1.0, -2.0, -0.5]), PairFeatures(0)
            )
        assert len(memory.mentions) == expected_entities
    with pytest.raises(ConfigError, match="'min_mention_score': 'high' is not a number or null"):
        incremental_config(min_mention_score="high")


def test_min_mention_score_in_training_reads_the_score_without_a_warning():
    """The mention scores carry gradients in training; the filter reads their value detached."""
    model = IncrementalCorefModel(incremental_config(threshold=1e9, min_mention_score=0.0), tiny_encoder()).train()
    mention_scores = torch.tensor([1.0, -2.0, -0.5], requires_grad=True)
    memory = EntityMemory()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.resolve_spans(
            memory, [0, 2, 4], [0, 2, 4], torch.randn(3, model.span_dim), mention_scores, PairFeatures(0)
        )
    assert len(memory.mentions) == 1


def test_gold_targets_latest_and_all_antecedents():
    document = tiny_tensors(make_document(num_segments=1), tiny_config())
    document.gold_starts = torch.tensor([1, 3, 5, 7])
    document.gold_ends = torch.tensor([1, 3, 5, 7])
    document.gold_cluster_ids = torch.tensor([1, 1, 1, 2])
    gold = GoldAntecedents(document)
    memory = EntityMemory()
    first = memory.add(torch.zeros(2), torch.zeros(2), (1, 1), torch.tensor(0.0))
    second = memory.add(torch.zeros(2), torch.zeros(2), (3, 3), torch.tensor(0.0))  # wrongly a new entity
    assert gold.target_ids((5, 5), memory, all_antecedents=False) == [second]
    assert gold.target_ids((5, 5), memory, all_antecedents=True) == [second, first]
    assert gold.target_ids((1, 1), memory, all_antecedents=False) == []  # first mention: new entity
    assert gold.target_ids((7, 7), memory, all_antecedents=True) == []  # its cluster has no earlier mention
    assert gold.target_ids((2, 2), memory, all_antecedents=True) == []  # not a gold mention
    # The most recent antecedent evicted (or missed): the new-entity option is gold.
    memory.consolidate()
    memory.mentions[second][-1] = (-5000, -5000)  # its mention now far behind
    memory.evict(0, singleton_distance=600, distance=None)
    assert gold.target_ids((5, 5), memory, all_antecedents=False) == []
    assert gold.target_ids((5, 5), memory, all_antecedents=True) == [first]


def test_active_entities_stay_bounded_on_a_long_document():
    # A threshold above every score: each span is a new entity, the worst case for memory.
    config = incremental_config(evict_singleton_distance=20, evict_distance=40, top_span_ratio=0.5, threshold=1e6)
    model = IncrementalCorefModel(config, tiny_encoder()).eval()
    peaks = {}
    for segments in (4, 24):
        document = tiny_tensors(make_document(num_segments=segments, seed=segments), config)
        with torch.no_grad():
            output = model(document)
        peaks[segments] = output.memory.max_active
        assert len(output.memory.active) <= peaks[segments]
    # Eviction bounds the active list: six times the text, the same ceiling (a segment holds 16 subtokens).
    assert peaks[24] <= 3 * 16
    unbounded = IncrementalCorefModel(
        incremental_config(evict_singleton_distance=None, evict_distance=None, top_span_ratio=0.5, threshold=1e6),
        tiny_encoder(),
    ).eval()
    with torch.no_grad():
        output = unbounded(tiny_tensors(make_document(num_segments=24, seed=24), config))
    assert output.memory.max_active == len(output.kept_spans) > 3 * peaks[24]


def test_training_backpropagates_per_segment_and_detaches():
    torch.manual_seed(0)
    model = IncrementalCorefModel(incremental_config(), tiny_encoder())
    model.train()
    assert not model.encoder.training  # a frozen encoder stays in evaluation mode
    document = tiny_tensors(make_document(num_segments=3), model.config)
    reader = model.read_segments(document, train=True)
    segment_losses = []
    while True:
        try:
            loss = next(reader)
        except StopIteration as finished:
            output = finished.value
            break
        assert loss.requires_grad and loss.dim() == 0
        # Nothing from an earlier segment is still in the graph: its entities were detached.
        loss.backward()
        segment_losses.append(float(loss.detach()))
    assert len(segment_losses) >= 2  # one backward per segment, not one per document
    assert output.loss == pytest.approx(sum(segment_losses)) and output.loss > 0
    grads = [p.grad for p in model.pair_scorer.parameters() if p.requires_grad]
    assert any(g is not None and g.abs().sum() > 0 for g in grads)
    assert all(p.grad is None for p in model.encoder.parameters())
    assert output.memory.base_embeddings is None or not output.memory.base_embeddings.requires_grad


def test_baseline_pair_features_are_the_baselines_for_the_anchor_as_antecedent():
    """pair_features: baseline gives each (span, anchor) pair the baseline's phi for that antecedent:
    same speaker, distance in kept spans and segment distance (clamped), across segments."""
    torch.manual_seed(0)
    config = tiny_config(max_training_sentences=2)
    baseline = BaselineCorefModel(config, tiny_encoder()).eval()
    model = IncrementalCorefModel(
        IncrementalConfig.from_baseline(config.to_dict(), {"pair_features": "baseline"}), tiny_encoder()
    ).eval()
    copy_baseline_weights(model, baseline.state_dict())
    document = tiny_tensors(make_document(num_segments=4, seed=3), config)
    starts, ends = document.candidate_spans(config.max_span_width, False, slice(0, document.num_tokens))
    kept = torch.arange(0, starts.shape[0], 3)  # every third candidate: the "kept spans", in order
    spans = list(zip(starts[kept].tolist(), ends[kept].tolist(), strict=True))
    k = len(spans)
    antecedents = torch.tensor([[max(0, i - 1 - c * 7) for c in range(6)] for i in range(k)])  # [k, 6], far back too
    with torch.no_grad():
        expected = baseline.pair_features(
            antecedents, starts[kept], document.speaker_ids, document.segment_of_token, document.genre
        )  # [k, 6, F]
        features = PairFeatures.of_document(document, model.config)
        features.rank_of_span.update((span, rank) for rank, span in enumerate(spans))
        located = features.locate(spans, torch.device("cpu"))  # [k, 2]
        found = features(model.pair_scorer, located, located[antecedents])
    torch.testing.assert_close(found, expected, rtol=0, atol=0)
    segments = document.segment_of_token[starts[kept]]
    assert int((segments.unsqueeze(1) - segments[antecedents]).max()) >= 2  # the clamp at 1 is exercised
    assert len(set(document.speaker_ids[starts[kept]].tolist())) > 1
    paper = PairFeatures(document.genre)
    with torch.no_grad():
        differs = paper(model.pair_scorer, paper.locate(spans, torch.device("cpu")), located[antecedents])
    assert not torch.equal(differs, expected)  # the paper's features are another thing


def segment_losses(model: IncrementalCorefModel, document) -> list[float]:
    return [float(loss.detach()) for loss in model.training_losses(document) if not loss.backward()]


def test_mention_loss_coef_adds_the_weighted_mention_loss_of_every_segments_candidates():
    document = tiny_tensors(make_document(num_segments=3, seed=2), incremental_config())
    losses = {}
    for coef in (0.0, 0.5):
        torch.manual_seed(0)
        model = IncrementalCorefModel(incremental_config(mention_loss_coef=coef), tiny_encoder(seed=4)).train()
        losses[coef] = segment_losses(model, document)
        mention_grad = model.span_scorer.mention_scores.output.weight.grad
    # The mention loss of each segment, computed here from the span scorer and the gold spans.
    gold = set(zip(document.gold_starts.tolist(), document.gold_ends.tolist(), strict=True))
    expected, offset = [], 0
    with torch.no_grad():
        for index, length in enumerate(document.attention_mask.sum(dim=1).tolist()):
            hidden = model.encode_segment(document, index)
            starts, ends = document.candidate_spans(
                model.config.max_span_width, model.config.word_boundary_spans, slice(offset, offset + length)
            )
            scores = model.span_scorer.score_candidates(
                hidden, starts, ends, model.span_scorer.width_features(starts, ends)
            )
            labels = torch.tensor(
                [(s + offset, e + offset) in gold for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
            )
            assert labels.any() and not labels.all()
            expected.append(float(torch.nn.functional.softplus(torch.where(labels, -scores, scores)).sum()))
            offset += length
    assert len(losses[0.0]) == len(losses[0.5]) == len(expected)
    for without, with_mentions, mentions in zip(losses[0.0], losses[0.5], expected, strict=True):
        assert with_mentions == pytest.approx(without + 0.5 * mentions, rel=1e-5)
    assert mention_grad is not None and mention_grad.abs().sum() > 0
    with pytest.raises(ConfigError, match="incremental model key 'mention_loss_coef' must be 0 or more"):
        incremental_config(mention_loss_coef=-0.1)


def test_a_mention_loss_over_the_top_spans_is_over_each_segments_kept_spans():
    document = tiny_tensors(make_document(num_segments=3, seed=2), incremental_config())
    losses = {}
    for coef in (0.0, 0.5):
        torch.manual_seed(0)
        config = incremental_config(mention_loss_coef=coef, mention_loss_spans="top", top_span_ratio=0.9)
        model = IncrementalCorefModel(config, tiny_encoder(seed=4)).train()
        losses[coef] = segment_losses(model, document)
        mention_grad = model.span_scorer.mention_scores.output.weight.grad
    gold = set(zip(document.gold_starts.tolist(), document.gold_ends.tolist(), strict=True))
    expected, offset, all_labels = [], 0, []
    with torch.no_grad():
        for index, length in enumerate(document.attention_mask.sum(dim=1).tolist()):
            starts, ends, _, scores, _ = model.segment_spans(document, model.encode_segment(document, index), offset)
            labels = torch.tensor(
                [(s + offset, e + offset) in gold for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
            )
            all_labels.append(labels)
            expected.append(float(torch.nn.functional.softplus(torch.where(labels, -scores, scores)).sum()))
            offset += length
    kept_labels = torch.cat(all_labels)
    assert kept_labels.any() and not kept_labels.all()  # gold and other kept spans
    assert len(losses[0.0]) == len(losses[0.5]) == len(expected)
    for without, with_mentions, mentions in zip(losses[0.0], losses[0.5], expected, strict=True):
        assert with_mentions == pytest.approx(without + 0.5 * mentions, rel=1e-5)
    assert mention_grad is not None and mention_grad.abs().sum() > 0


@pytest.mark.parametrize("pair_features", ["paper", "baseline"])
def test_a_one_mention_entity_scores_as_the_baseline_scores_that_antecedent(pair_features):
    """score: calibrated = PAIRSCORE + s_m(m) + s_m(e's mention) + coarse: the baseline's antecedent score.

    With ``pair_features: paper`` the pair features are off: the paper's (no speaker, distance in
    subtokens, segment distance 0) differ from the baseline's by design; ``baseline`` computes the
    baseline's, and they are on. ``coref_depth`` 1: no refinement.
    """
    torch.manual_seed(0)
    on = pair_features == "baseline"
    sizes = dict(use_metadata=on, use_features=on, use_segment_distance=on, use_prior=False)
    baseline_config = tiny_config(coref_depth=1, top_span_ratio=0.8, **sizes)
    baseline = BaselineCorefModel(baseline_config, tiny_encoder(seed=3)).eval()
    document = tiny_tensors(make_document(num_segments=1), baseline_config)
    with torch.no_grad():
        output = baseline(document)
    forms = {}
    for score in ("paper", "calibrated"):
        config = IncrementalConfig.from_baseline(
            baseline_config,
            {"dropout_rate": 0.0, "score": score, "top_span_ratio": 0.8, "pair_features": pair_features},
        )
        model = IncrementalCorefModel(config, tiny_encoder(seed=4)).eval()
        copy_baseline_weights(model, baseline.state_dict())
        forms[score] = model
    model = forms["calibrated"]
    with torch.no_grad():
        hidden = model.encode_segment(document, 0)
        starts, ends, embeddings, mention_scores, _ = model.segment_spans(document, hidden, 0)
    # One segment: the same kept spans, embeddings and mention scores as the baseline's.
    assert torch.equal(starts, output.top_span_starts) and torch.equal(ends, output.top_span_ends)
    torch.testing.assert_close(embeddings, output.top_span_emb)
    spans = list(zip(starts.tolist(), ends.tolist(), strict=True))
    features = PairFeatures.of_document(document, model.config)
    features.rank_of_span.update((span, rank) for rank, span in enumerate(spans))
    if on:  # the features vary: speakers, distances
        assert len(set(document.speaker_ids.tolist())) > 1
    compared = 0
    for i in range(1, starts.shape[0]):
        valid = output.top_antecedent_mask[i]
        antecedents = output.top_antecedents[i][valid].tolist()
        expected = output.top_antecedent_scores[i, 1:][valid]  # the baseline's score of each antecedent
        for consolidated in (False, True):  # entities added in this segment, then carried over from an earlier one
            memory = EntityMemory()
            for j in antecedents:
                projection = model.pair_scorer.project_candidates(embeddings[j][None])[0]
                memory.add(embeddings[j], projection, (int(starts[j]), int(ends[j])), mention_scores[j])
            if consolidated:
                memory.consolidate()
            with torch.no_grad():
                calibrated = model.pair_scores(memory, embeddings[i], spans[i], features)
                paper = forms["paper"].pair_scores(memory, embeddings[i], spans[i], features)
            # One entity row against the baseline's [k, c] pairs: the fine FFNN in other GEMM shapes, and the
            # coarse term (a projection of g, then its product with g) summed in other orders.
            terms = ffnn_terms(model.pair_scorer.slow_antecedent_scores) + 2 * model.span_dim
            assert_reordered_close(calibrated + mention_scores[i], expected, terms)
            # The paper's form lacks exactly the entity's mention score and the coarse term.
            coarse = embeddings[antecedents] @ model.src_projection(embeddings[i])
            paper_plus_terms = paper + mention_scores[i] + mention_scores[antecedents] + coarse
            assert_reordered_close(paper_plus_terms, expected, terms)
            compared += len(antecedents)
    assert compared > 20


def test_calibrated_entities_carry_their_most_recent_mentions_score():
    for threshold, expected in ((-1e9, [7.0]), (1e9, [3.0, 7.0])):  # joins the first entity / a new one
        model = IncrementalCorefModel(incremental_config(score="calibrated", threshold=threshold), tiny_encoder())
        model.eval()
        d = model.span_dim
        mentions = torch.ones(2, d)
        memory = EntityMemory()
        with torch.no_grad():
            model.resolve_spans(memory, [0, 4], [0, 4], mentions, torch.tensor([3.0, 7.0]), PairFeatures(0))
        memory.consolidate()
        assert memory.base_priors.tolist() == expected


def memory_of(model: IncrementalCorefModel, count: int, updated: int) -> EntityMemory:
    """``count`` entities carried over from an earlier segment, the first ``updated`` of them updated in this one."""
    memory = EntityMemory()
    for index in range(count):
        embedding = torch.randn(model.span_dim)
        projection = model.pair_scorer.project_candidates(embedding[None])[0]
        memory.add(embedding, projection, (10 * index, 10 * index), torch.randn(()))
    memory.consolidate()
    for entity_id in range(updated):
        embedding = torch.randn(model.span_dim)
        projection = model.pair_scorer.project_candidates(embedding[None])[0]
        memory.update(entity_id, embedding, projection, (500 + entity_id, 500 + entity_id), torch.randn(()))
    return memory


@pytest.mark.parametrize("score", ["paper", "calibrated"])
def test_the_entity_prefilter_scores_the_top_k_by_coarse_score_exactly(score):
    torch.manual_seed(0)
    model = IncrementalCorefModel(incremental_config(score=score, max_top_entities=4), tiny_encoder()).eval()
    memory = memory_of(model, count=12, updated=3)  # 15 columns, 3 of them superseded: 12 live entities
    mention = torch.randn(model.span_dim)
    source = model.src_projection(mention).detach()

    def scores_with(limit, required=()):
        model.config = replace(model.config, max_top_entities=limit)
        with torch.no_grad():
            return model.pair_scores(
                memory, mention, (1000, 1000), PairFeatures(0), mention_source=source, required=required
            )

    reference = scores_with(None)
    # The pre-filtered rows go through the fine FFNN as GEMMs of other shapes: its sums in other roundings.
    terms = ffnn_terms(model.pair_scorer.slow_antecedent_scores)
    # K = the number of live entities (fewer than the columns): the pre-filter runs, every entity is scored.
    assert_reordered_close(scores_with(12), reference, terms)
    # K = 4: the 4 best by coarse score get exactly their unfiltered scores, the rest -inf.
    scores = scores_with(4)
    columns = torch.cat([memory.base_embeddings, torch.stack(memory.fresh_embeddings)])
    priors = torch.cat([memory.base_priors, torch.stack(memory.fresh_priors)])
    coarse = columns @ source + priors
    coarse[list(memory.superseded)] = float("-inf")
    best = sorted(torch.topk(coarse, 4).indices.tolist())
    assert torch.isfinite(scores).nonzero().flatten().tolist() == best
    assert_reordered_close(scores[best], reference[best], terms)
    # In training the gold columns are among the K scored, whatever their coarse score.
    worst = int(torch.argmin(coarse.masked_fill(torch.isinf(coarse), 1e9)))
    with_gold = scores_with(4, required=[worst])
    assert torch.isfinite(with_gold[worst]) and int(torch.isfinite(with_gold).sum()) == 4  # within the K
    assert_reordered_close(with_gold[worst], reference[worst], terms)


@pytest.mark.parametrize("limit", [None, 4])
def test_the_coarse_floor_scores_only_the_columns_above_it_exactly(limit):
    torch.manual_seed(0)
    model = IncrementalCorefModel(incremental_config(max_top_entities=limit), tiny_encoder()).eval()
    memory = memory_of(model, count=12, updated=3)  # 15 columns, 3 of them superseded
    mention = torch.randn(model.span_dim)
    source = model.src_projection(mention).detach()
    columns = torch.cat([memory.base_embeddings, torch.stack(memory.fresh_embeddings)])
    priors = torch.cat([memory.base_priors, torch.stack(memory.fresh_priors)])
    coarse = columns @ source + priors  # [15]: the entity's prior + the bilinear term
    with torch.no_grad():
        reference = model.pair_scores(memory, mention, (1000, 1000), PairFeatures(0), mention_source=source)
    floor = float(coarse[torch.isfinite(reference)].median())  # about half the scored columns above it
    with torch.no_grad():
        scores = model.pair_scores(memory, mention, (1000, 1000), PairFeatures(0), mention_source=source, floor=floor)
    # At or below the floor: -inf, never scored; above it, the scores without a floor (the same GEMMs on fewer rows).
    assert torch.isfinite(scores).tolist() == (torch.isfinite(reference) & (coarse > floor)).tolist()
    assert int(torch.isfinite(scores).sum()) >= 2 and int((torch.isfinite(reference) & (coarse <= floor)).sum()) >= 2
    finite = torch.isfinite(scores)
    assert_reordered_close(scores[finite], reference[finite], ffnn_terms(model.pair_scorer.slow_antecedent_scores))


def test_the_coarse_floor_is_for_inference_with_the_calibrated_score():
    model = IncrementalCorefModel(incremental_config(min_coarse_score=0.5), tiny_encoder())
    scores = torch.tensor([1.0, -2.0])
    assert model.eval().coarse_floors(scores).tolist() == [-0.5, 2.5]  # F - s_m(m): the pair's whole coarse > F
    assert model.train().coarse_floors(scores) is None  # training scores every column
    assert IncrementalCorefModel(incremental_config(), tiny_encoder()).eval().coarse_floors(scores) is None
    with pytest.raises(ConfigError, match="'min_coarse_score' needs score: calibrated"):
        incremental_config(score="paper", min_coarse_score=0.0)


@pytest.mark.parametrize(
    "slots", [dict(), dict(recent_mentions=2, entity_representation=False)], ids=["repr", "2_mentions"]
)
@pytest.mark.parametrize("limit", [None, 2])
def test_batch_per_segment_with_the_coarse_floor_makes_the_same_decisions_on_fewer_pairs(monkeypatch, limit, slots):
    document = tiny_tensors(make_document(num_segments=6, seed=6), tiny_config())
    outputs, logs = {}, {}
    for batch, floor in ((True, 0.0), (False, 0.0), (True, None)):
        model = batching_model(batch, max_top_entities=limit, min_coarse_score=floor, **slots).eval()
        logs[batch, floor] = ScoringLog(model, monkeypatch)
        with torch.no_grad():
            outputs[batch, floor] = model(document)
    batched, single = outputs[True, 0.0], outputs[False, 0.0]
    assert batched.clusters == single.clusters and batched.kept_spans == single.kept_spans
    assert len(batched.clusters) >= 3
    terms = ffnn_terms(model.pair_scorer.slow_antecedent_scores) + 2 * model.span_dim
    for found, expected in zip(logs[True, 0.0].logits, logs[False, 0.0].logits, strict=True):
        assert_reordered_close(found, expected, terms)
    # The floor left pairs out of the segments' batched passes.
    assert 0 < logs[True, 0.0].pairs < logs[True, None].pairs


def test_with_k_at_least_the_number_of_entities_the_decisions_are_identical(monkeypatch):
    document = tiny_tensors(make_document(num_segments=3), tiny_config())

    def decide(limit):
        torch.manual_seed(0)
        model = IncrementalCorefModel(incremental_config(threshold=0.0, max_top_entities=limit), tiny_encoder(seed=1))
        with torch.no_grad():
            return model.eval()(document)

    unfiltered = decide(None)
    entities = unfiltered.memory.max_active  # the most entities ever active at once
    assert unfiltered.clusters and entities >= 2
    calls = []
    original = IncrementalCorefModel._prefiltered_scores
    monkeypatch.setattr(IncrementalCorefModel, "_prefiltered_scores", lambda *args: calls.append(1) or original(*args))
    filtered = decide(entities)  # K = the number of entities: the pre-filter runs when updates add columns
    assert calls, "the pre-filter never ran"
    assert filtered.clusters == unfiltered.clusters and filtered.kept_spans == unfiltered.kept_spans


def spread_pair_weights(model: IncrementalCorefModel, std: float = 0.3, seed: int = 0) -> None:
    """Redraw the pair scorer and coarse weights wider than the initialisation, so entities score apart."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        modules = [model.pair_scorer] + ([model.src_projection] if model.uses_coarse else [])
        for module in modules:
            for parameter in module.parameters():
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)


def batching_model(batch: bool, **overrides) -> IncrementalCorefModel:
    """The same tiny model (weights spread) with ``batch_per_segment`` on or off."""
    torch.manual_seed(0)
    values = dict(top_span_ratio=0.5, threshold=1.0, batch_per_segment=batch) | overrides
    model = IncrementalCorefModel(incremental_config(**values), tiny_encoder(seed=1))
    spread_pair_weights(model)
    return model


class ScoringLog:
    """Records, on one model, every ``pair_scores`` result, the fine FFNN's calls and the on-demand base scores."""

    def __init__(self, model: IncrementalCorefModel, monkeypatch: pytest.MonkeyPatch) -> None:
        self.logits: list[torch.Tensor] = []
        self.index_rows: list[int] = []  # rows of the index of each PairScorer.scores call
        self.pairs = 0  # pairs through the fine FFNN
        self.on_demand = 0  # per-span fine calls that include a base entity not superseded (batched path)
        self.superseded = 0  # pair_scores calls with a superseded base row
        self.own_looked_up = 0  # fresh mention columns whose score came from base_scores (its own spans)
        pair_scores, scores, score_against = model.pair_scores, model.pair_scorer.scores, model._score_against
        own_columns = model._own_columns

        def logged_pair_scores(memory, *args, **kwargs):
            found = pair_scores(memory, *args, **kwargs)
            self.logits.append(found.detach().clone())
            self.superseded += bool(memory.superseded)
            return found

        def logged_scores(targets, candidates, index, *args, **kwargs):
            self.index_rows.append(index.shape[0])
            self.pairs += index.numel()
            return scores(targets, candidates, index, *args, **kwargs)

        def logged_score_against(entities, projections, priors, ids, memory, *args):
            self.on_demand += any(e in memory.base_ids and e not in memory.fresh_ids for e in ids)
            return score_against(entities, projections, priors, ids, memory, *args)

        def logged_own_columns(*args):
            found = own_columns(*args)
            self.own_looked_up += found[0].numel()
            return found

        monkeypatch.setattr(model, "pair_scores", logged_pair_scores)
        monkeypatch.setattr(model, "_own_columns", logged_own_columns)
        monkeypatch.setattr(model.pair_scorer, "scores", logged_scores)
        monkeypatch.setattr(model, "_score_against", logged_score_against)


MENTION_SLOTS = [
    dict(),
    dict(recent_mentions=2),
    dict(recent_mentions=2, entity_representation=False),
    dict(recent_mentions=2, pair_features="baseline"),
]


@pytest.mark.parametrize(
    "slots", MENTION_SLOTS, ids=["representation", "and_2_mentions", "2_mentions", "baseline_features"]
)
@pytest.mark.parametrize("margin", [0.0, incremental_module.PREFILTER_MARGIN], ids=["no_margin", "margin"])
@pytest.mark.parametrize("limit", [None, 2])
@pytest.mark.parametrize("score", ["paper", "calibrated"])
def test_batch_per_segment_makes_the_same_decisions(monkeypatch, score, limit, slots, margin):
    monkeypatch.setattr(incremental_module, "PREFILTER_MARGIN", margin)
    document = tiny_tensors(make_document(num_segments=6, seed=6), tiny_config())
    outputs, logs = {}, {}
    for batch in (True, False):
        model = batching_model(batch, score=score, max_top_entities=limit, **slots).eval()
        logs[batch] = ScoringLog(model, monkeypatch)
        with torch.no_grad():
            outputs[batch] = model(document)
    batched, single = outputs[True], outputs[False]
    # The decisions are compared exactly, the scores they take within rounding (below): an argmax agrees unless its
    # two best options lie within rounding of each other. In these seeded documents the closest decision's two best
    # options are 4.5e-3 apart, about 15 times the bound the scores are compared to: no CPU's rounding flips one.
    assert batched.clusters == single.clusters and batched.kept_spans == single.kept_spans
    assert batched.memory.mentions == single.memory.mentions
    # Non-trivial decisions: new entities, updates, base entities updated within a later segment.
    mentions = batched.memory.mentions.values()
    assert len(batched.clusters) >= 3 and sum(len(m) == 1 for m in mentions) >= 3
    assert logs[True].superseded > 0
    assert len(logs[True].logits) == len(logs[False].logits) > 20
    # A segment's spans scored as one GEMM or one at a time: the fine FFNN (and the coarse pre-filter's
    # projection) in other roundings; -inf in the same columns.
    terms = ffnn_terms(model.pair_scorer.slow_antecedent_scores) + 2 * model.span_dim
    for found, expected in zip(logs[True].logits, logs[False].logits, strict=True):
        assert_reordered_close(found, expected, terms)
    if limit is not None and not slots and not margin:  # some chosen base columns were not among the precomputed K
        assert logs[True].on_demand > 0
    # Mention columns only: the segment's own spans' slots were scored in its batched pass.
    own = limit is not None and slots.get("entity_representation") is False
    assert (logs[True].own_looked_up > 0) == own and logs[False].own_looked_up == 0


@pytest.mark.parametrize(
    "overrides",
    [
        dict(score="calibrated"),
        dict(score="paper", max_top_entities=2),
        dict(score="calibrated", max_top_entities=2, negative_sample_rate=0.5, loss="all_antecedents"),
        dict(score="calibrated", recent_mentions=2),
        dict(score="calibrated", max_top_entities=3, recent_mentions=2, entity_representation=False),
        dict(score="calibrated", max_top_entities=3, recent_mentions=2, pair_features="baseline"),
        dict(score="calibrated", recent_mentions=2, entity_representation=False, mention_loss_coef=0.5),
    ],
)
@pytest.mark.parametrize("margin", [0.0, incremental_module.PREFILTER_MARGIN], ids=["no_margin", "margin"])
def test_batch_per_segment_gives_the_same_training_losses_and_gradients(monkeypatch, overrides, margin):
    monkeypatch.setattr(incremental_module, "PREFILTER_MARGIN", margin)
    document = tiny_tensors(make_document(num_segments=6, seed=6), tiny_config())
    losses, gradients, logs = {}, {}, {}
    for batch in (True, False):
        model = batching_model(batch, **overrides).train()
        logs[batch] = ScoringLog(model, monkeypatch)
        torch.manual_seed(5)  # the negative-sampling draws
        losses[batch] = []
        for loss in model.training_losses(document):
            loss.backward()
            losses[batch].append(loss.detach())
        gradients[batch] = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    assert len(losses[True]) >= 3 and len(logs[True].logits) == len(logs[False].logits)
    if "max_top_entities" in overrides and not margin:  # a next-best base column outside the span's precomputed K
        assert logs[True].on_demand > 0
    # A segment's spans scored as one GEMM or one at a time: the scores' sums (the fine FFNN, the coarse
    # projection) in other roundings, then each loss sums its spans' log-sum-exps over the columns, and a
    # weight's gradient sums over the scored pairs.
    pairs = sum(logits.numel() for logits in logs[True].logits)
    terms = ffnn_terms(model.pair_scorer.slow_antecedent_scores) + 2 * model.span_dim + pairs
    assert_reordered_close(torch.stack(losses[True]), torch.stack(losses[False]), terms)
    assert any(name.startswith("pair_scorer.") for name in gradients[True])
    assert_gradients_reordered_close(gradients[True], gradients[False], terms)


@pytest.mark.parametrize("limit", [None, 2])
def test_batch_per_segment_scores_the_base_entities_once_per_segment(monkeypatch, limit):
    document = tiny_tensors(make_document(num_segments=6, seed=6), tiny_config())
    logs = {}
    for batch in (True, False):
        model = batching_model(batch, max_top_entities=limit).eval()
        logs[batch] = ScoringLog(model, monkeypatch)
        with torch.no_grad():
            output = model(document)
    # Every segment but the first starts with entities (none is evicted from this short document).
    assert not output.memory.evicted
    segments = document.input_ids.shape[0]
    assert sum(rows > 1 for rows in logs[True].index_rows) == segments - 1  # one [k, B] (or [k, K]) call each
    assert all(rows == 1 for rows in logs[False].index_rows)  # one span at a time
    assert len(logs[True].index_rows) < len(logs[False].index_rows)


def test_batch_per_segment_in_chunks_of_spans_makes_the_same_decisions(monkeypatch):
    """With a tiny chunk limit the segment's spans go through the fine FFNN a few at a time: same results."""
    incremental = incremental_module
    document = tiny_tensors(make_document(num_segments=6, seed=6), tiny_config())
    outputs, logs, default = {}, {}, incremental.BASE_SCORE_CHUNK_ELEMENTS
    for chunk in (default, 1):
        monkeypatch.setattr(incremental, "BASE_SCORE_CHUNK_ELEMENTS", chunk)
        model = batching_model(True, score="calibrated").eval()
        logs[chunk] = ScoringLog(model, monkeypatch)
        with torch.no_grad():
            outputs[chunk] = model(document)
    whole, chunked = outputs[default], outputs[1]
    assert chunked.clusters == whole.clusters and chunked.memory.mentions == whole.memory.mentions
    # Chunks of spans are GEMMs of other shapes: the fine FFNN in other roundings.
    terms = ffnn_terms(model.pair_scorer.slow_antecedent_scores)
    for found, expected in zip(logs[1].logits, logs[default].logits, strict=True):
        assert_reordered_close(found, expected, terms)
    # One span per call in chunks of one element's worth; the whole segment at once otherwise.
    assert max(logs[1].index_rows) == 1 and max(logs[default].index_rows) > 1


@pytest.mark.parametrize(
    "overrides",
    [dict(max_top_entities=2), dict(max_top_entities=3, recent_mentions=2, entity_representation=False)],
    ids=["representations", "mention_columns"],
)
def test_batched_training_reads_the_loss_from_the_segments_batched_pass(monkeypatch, overrides):
    """The decisions run without gradients; the fine FFNN runs with them in each segment's batched pass, whose
    scores the loss reads, and once more for the options scored on demand (span by span: once per span)."""
    document = tiny_tensors(make_document(num_segments=6, seed=6), tiny_config())
    graph_calls, options = {}, {"batched": 0, "on demand": 0}
    segment_loss = incremental_module.SegmentLoss.loss

    def counted_loss(replay, *args):
        options["batched"] += sum(len(batched) for batched in replay.batched)
        options["on demand"] += sum(len(scored) for scored in replay.options)
        return segment_loss(replay, *args)

    monkeypatch.setattr(incremental_module.SegmentLoss, "loss", counted_loss)
    for batch in (True, False):
        model = batching_model(batch, score="calibrated", **overrides).train()
        scores, calls = model.pair_scorer.scores, []

        def counted(*args, scores=scores, calls=calls, **kwargs):
            calls.append(torch.is_grad_enabled())
            return scores(*args, **kwargs)

        monkeypatch.setattr(model.pair_scorer, "scores", counted)
        losses = list(model.training_losses(document))
        graph_calls[batch] = sum(calls)
    assert len(losses) >= 3
    assert len(losses) <= graph_calls[True] <= 2 * len(losses)  # the batched pass (+ the options scored on demand)
    assert graph_calls[False] > 2 * graph_calls[True]  # one per span
    assert options["batched"] > options["on demand"]  # most of the loss's options from the batched pass


def test_recent_mentions_are_kept_as_scoring_columns_of_their_entity():
    """recent_mentions 2: an entity's representation and its two latest mentions; slots leave with the entity."""
    memory = EntityMemory(recent_mentions=2)
    mentions = [torch.full((4,), float(value)) for value in range(4)]
    entity_id = memory.add(mentions[0], torch.zeros(2), (0, 0), torch.tensor(0.0))
    assert memory.columns() == [entity_id] and not memory.owner  # one mention: its representation is that mention
    memory.consolidate()
    for index in (1, 2, 3):
        span = (10 * index, 10 * index)
        memory.update(
            entity_id,
            torch.full((4,), 9.0),
            torch.ones(2),
            span,
            torch.tensor(float(index)),
            (mentions[index], -torch.ones(2)),
        )
        if index == 1:  # the first mention got its slot (from the representation before the update) with the second's
            assert [memory.slot_span[slot] for slot in memory.slots[entity_id]] == [(0, 0), (10, 10)]
            assert set(memory.changed) == {entity_id, *memory.slots[entity_id]}
    slots = memory.slots[entity_id]
    assert [memory.slot_span[slot] for slot in slots] == [(20, 20), (30, 30)]
    assert [memory.entity_of(slot) for slot in slots] == [entity_id, entity_id]
    assert [memory.anchor(slot) for slot in slots] == [(20, 20), (30, 30)] and memory.anchor(entity_id) == (30, 30)
    memory.consolidate()
    assert sorted(memory.base_ids) == sorted([entity_id, *slots])  # dropped slots left at the consolidation
    rows = {column_id: row for row, column_id in enumerate(memory.base_ids)}
    assert memory.base_embeddings[rows[slots[0]]].tolist() == [2.0] * 4  # the mention's own embedding
    assert memory.base_priors[rows[slots[1]]] == 3.0 and memory.base_projections[rows[slots[1]]].tolist() == [-1, -1]
    assert memory.base_embeddings[rows[entity_id]].tolist() == [9.0] * 4  # the representation
    assert memory.scored_columns([entity_id]) == sorted(rows.values())
    assert memory.evict(10_000, singleton_distance=None, distance=100) == [entity_id]
    assert memory.base_ids == [] and not memory.owner and not memory.slot_span and not memory.slots
    assert memory.mentions[entity_id] == [(0, 0), (10, 10), (20, 20), (30, 30)]


def test_without_entity_representations_only_mention_columns_are_scored():
    memory = EntityMemory(recent_mentions=1, score_representations=False)
    first = memory.add(torch.zeros(4), torch.zeros(2), (0, 0), torch.tensor(0.0))
    second = memory.add(torch.ones(4), torch.zeros(2), (5, 5), torch.tensor(0.0))
    assert len(memory.columns()) == 4 and len(memory.changed) == 2  # each entity: representation + slot
    scores = memory.mask_unscored(torch.zeros(4))
    assert [memory.entity_of(memory.columns()[c]) for c in torch.isfinite(scores).nonzero().flatten()] == [
        first,
        second,
    ]
    assert all(memory.columns()[c] in memory.owner for c in memory.scored_columns([second, first]))
    with pytest.raises(ConfigError, match="incremental model key 'entity_representation': false needs recent_mentions"):
        incremental_config(entity_representation=False)
    with pytest.raises(
        ConfigError, match="incremental model key 'recent_mentions' must be a number of mentions, 0 or more"
    ):
        incremental_config(recent_mentions=-1)


@pytest.mark.parametrize("pair_features", ["paper", "baseline"])
def test_entities_scored_by_all_their_mentions_make_the_baselines_decisions(pair_features):
    """recent_mentions covering every mention, no representation, no eviction: each entity scores as the best
    of its mentions as the baseline's antecedents, so the greedy decisions are the baseline's clusters.

    The pair features are off with the paper's (they differ by design) and on with the baseline's."""
    on = pair_features == "baseline"
    sizes = dict(use_metadata=on, use_features=on, use_segment_distance=on, use_prior=False)
    baseline_config = tiny_config(
        coref_depth=1, top_span_ratio=0.8, max_top_antecedents=200, max_segment_len=48, **sizes
    )  # every earlier span is an antecedent
    clusters, singletons = 0, 0
    for seed in range(4):
        torch.manual_seed(seed)
        baseline = BaselineCorefModel(baseline_config, tiny_encoder(seed=3 + seed)).eval()
        values = dict(dropout_rate=0.0, top_span_ratio=0.8, recent_mentions=100, entity_representation=False)
        values |= dict(pair_features=pair_features)
        values |= dict(evict_distance=None, evict_singleton_distance=None)
        model = IncrementalCorefModel(IncrementalConfig.from_baseline(baseline_config, values), tiny_encoder(seed=9))
        copy_baseline_weights(model, baseline.state_dict())
        # Pair scores and mention scores of one scale, mention scores mostly negative: links and new entities both.
        spread_pair_weights(model, std=0.05, seed=seed)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for parameter in model.span_scorer.mention_scores.parameters():
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
            model.span_scorer.mention_scores.output.bias.fill_(-1.0 if on else -4.0)
        baseline.load_state_dict(model.state_dict(), strict=False)
        document = tiny_tensors(make_document(num_segments=1, seed=seed, seg_len=48), baseline_config)
        with torch.no_grad():
            output = baseline.eval()(document)
            found = model.eval()(document)
        assert found.kept_spans == list(
            zip(output.top_span_starts.tolist(), output.top_span_ends.tolist(), strict=True)
        )
        expected = predicted_clusters(
            output.top_span_starts, output.top_span_ends, output.top_antecedents, output.top_antecedent_scores
        )
        assert found.clusters == sorted(sorted(cluster) for cluster in expected)
        clusters += len(found.clusters)
        singletons += len(found.kept_spans) - sum(len(cluster) for cluster in found.clusters)
    assert clusters >= 8 and singletons >= 20  # decisions of both kinds


def test_mention_slots_stay_bounded_and_leave_with_their_entity_on_a_long_document():
    config = incremental_config(
        evict_singleton_distance=10, evict_distance=20, top_span_ratio=0.5, threshold=10.0, recent_mentions=3
    )
    torch.manual_seed(0)
    model = IncrementalCorefModel(config, tiny_encoder()).eval()
    spread_pair_weights(model)  # entities score apart: some grow long, some are evicted
    with torch.no_grad():
        output = model(tiny_tensors(make_document(num_segments=24, seed=24), config))
    memory = output.memory
    assert len(memory.evicted) >= 3 and max(len(m) for m in memory.mentions.values()) > 3
    slots = [column_id for column_id in memory.base_ids if column_id in memory.owner]
    assert sorted(slots) == sorted(memory.owner) == sorted(memory.slot_span)  # no bookkeeping left behind
    assert set(memory.owner.values()) <= memory.active and set(memory.slots) <= memory.active
    assert all(len(slot_ids) <= 3 for slot_ids in memory.slots.values())
    assert len(memory.base_ids) <= 4 * len(memory.active)


@pytest.mark.parametrize("representation", [True, False])
def test_update_runs_only_when_entity_representations_are_scored(representation):
    """Without scored representations UPDATE (the update network) is skipped: it would change nothing scored.

    That the decisions are still the baseline's is test_entities_scored_by_all_their_mentions_make_the_baselines_decisions.
    """
    torch.manual_seed(0)
    config = incremental_config(
        recent_mentions=2, entity_representation=representation, threshold=-1.0, top_span_ratio=0.8
    )
    model = IncrementalCorefModel(config, tiny_encoder(seed=1))
    document = tiny_tensors(make_document(seed=3, num_segments=3), config)
    spread_pair_weights(model)
    calls = []
    model.alpha.register_forward_hook(lambda *_: calls.append(1))
    output = model(document)
    assert any(len(cluster) > 1 for cluster in output.clusters)  # spans did join entities
    assert bool(calls) == representation


def scored_columns_by_scan(memory: EntityMemory, entity_ids: list[int]) -> list[int]:
    """``scored_columns`` by its definition: every column not masked, grouped by the entity it scores."""
    masked = set(memory.masked_columns(len(memory.columns())))
    by_entity: dict[int, list[int]] = {}
    for column, column_id in enumerate(memory.columns()):
        if column not in masked:
            by_entity.setdefault(memory.entity_of(column_id), []).append(column)
    return [column for entity_id in entity_ids for column in by_entity.get(entity_id, [])]


@pytest.mark.parametrize("slots", MENTION_SLOTS, ids=["representation", "and_2_mentions", "2_mentions", "baseline"])
def test_scored_columns_are_every_unmasked_column_of_the_entities(monkeypatch, slots):
    """Looked up through the entities' slots, the gold columns are those a scan of every column finds, at every
    span of a training pass (superseded base rows and dropped slots included)."""
    document = tiny_tensors(make_document(num_segments=8, seed=6), tiny_config())
    values = dict(loss="all_antecedents", teacher_forcing_rate=1.0, top_span_ratio=1.0)  # gold links followed
    model = batching_model(True, **values, **slots).train()
    lookup, calls = EntityMemory.scored_columns, []

    def checked(memory, entity_ids):
        found = lookup(memory, entity_ids)
        assert found == scored_columns_by_scan(memory, list(entity_ids))
        calls.append((len(found), bool(memory.superseded), bool(memory.dropped)))
        return found

    monkeypatch.setattr(EntityMemory, "scored_columns", checked)
    for loss in model.training_losses(document):
        loss.backward()
    assert sum(found > 0 for found, _, _ in calls) >= 5  # gold entities found
    assert any(superseded for _, superseded, _ in calls)
    if slots.get("recent_mentions"):
        assert any(found > 1 for found, _, _ in calls) and any(dropped for _, _, dropped in calls)


def test_the_batched_pass_scores_only_the_spans_negative_sampling_keeps(monkeypatch):
    """negative_sample_rate < 1 in training: the spans are drawn before the segment's batched pass, which then
    scores exactly the spans read afterwards (every gold span, some others), not every kept span."""
    document = tiny_tensors(make_document(num_segments=6, seed=6), tiny_config())
    model = batching_model(True, negative_sample_rate=0.3, max_top_entities=2).train()
    segments = []  # per segment: kept spans, spans of the batched pass (None: no pass), spans read one by one
    base_scores, pair_scores, resolve_spans = model.base_scores, model.pair_scores, model.resolve_spans

    def logged_base_scores(memory, spans, *args):
        segments[-1]["batched"] = list(spans)
        return base_scores(memory, spans, *args)

    def logged_pair_scores(memory, mention, span, *args, **kwargs):
        segments[-1]["read"].append(span)
        return pair_scores(memory, mention, span, *args, **kwargs)

    def logged_resolve_spans(memory, starts, ends, *args, **kwargs):
        segments.append({"kept": list(zip(starts, ends, strict=True)), "batched": None, "read": []})
        return resolve_spans(memory, starts, ends, *args, **kwargs)

    monkeypatch.setattr(model, "base_scores", logged_base_scores)
    monkeypatch.setattr(model, "pair_scores", logged_pair_scores)
    monkeypatch.setattr(model, "resolve_spans", logged_resolve_spans)
    torch.manual_seed(3)
    for loss in model.training_losses(document):
        loss.backward()
    gold = GoldAntecedents(document)
    with_pass = [segment for segment in segments if segment["batched"] is not None]
    assert len(with_pass) >= 3
    for segment in with_pass:
        assert set(segment["read"]) <= set(segment["batched"]) <= set(segment["kept"])
        assert {span for span in segment["kept"] if gold.is_gold(span)} <= set(segment["batched"])
    kept = sum(len(segment["kept"]) for segment in with_pass)
    batched = sum(len(segment["batched"]) for segment in with_pass)
    assert any(gold.is_gold(span) for segment in with_pass for span in segment["batched"])
    assert batched < 0.7 * kept  # the sampled-out spans were not scored


def gold_base_rows_scored_on_demand(model: IncrementalCorefModel, document, monkeypatch) -> int:
    """How many of the required (gold) options that are base rows a training pass scores on demand."""
    pair_scores, score_against = model.pair_scores, model._score_against
    required_ids: set[int] = set()
    count = 0

    def logged_pair_scores(memory, mention, span, features, weights, projection, source, required, *rest):
        required_ids.clear()
        required_ids.update(memory.columns()[column] for column in required)
        return pair_scores(memory, mention, span, features, weights, projection, source, required, *rest)

    def logged_score_against(entities, projections, priors, ids, memory, *args):
        nonlocal count  # base rows only: a column created or updated in the segment is always scored on demand
        count += sum(column in required_ids and column not in memory.fresh_ids for column in ids)
        return score_against(entities, projections, priors, ids, memory, *args)

    monkeypatch.setattr(model, "pair_scores", logged_pair_scores)
    monkeypatch.setattr(model, "_score_against", logged_score_against)
    torch.manual_seed(5)
    for loss in model.training_losses(document):
        loss.backward()
    return count


@pytest.mark.parametrize(
    "slots",
    [dict(max_top_entities=2), dict(max_top_entities=5, recent_mentions=2, entity_representation=False)],
    ids=["representation", "2_mentions"],
)
def test_batched_training_scores_the_gold_columns_in_the_segments_pass(monkeypatch, slots):
    """In training each span's gold options among the entities at its segment's start are columns the segment's
    batched pass computes (they would otherwise go through the fine FFNN on demand, span by span); without that
    choice some are not. (A base entity can still become gold within the segment, when an earlier span of the
    cluster joins it: K is wide enough here for none of those to be left out of the pass.)"""
    document = tiny_tensors(make_document(num_segments=12, seed=3), tiny_config())
    model = batching_model(True, score="calibrated", loss="all_antecedents", **slots).train()
    assert gold_base_rows_scored_on_demand(model, document, monkeypatch) == 0
    model = batching_model(True, score="calibrated", loss="all_antecedents", **slots).train()
    gold_columns = model.gold_columns
    monkeypatch.setattr(model, "gold_columns", lambda *args: torch.zeros_like(gold_columns(*args)))
    assert gold_base_rows_scored_on_demand(model, document, monkeypatch) > 0
