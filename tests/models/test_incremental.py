"""The incremental model: initialisation from the baseline, decisions, eviction, gold targets, memory, and how a
segment is computed (its batched passes, the host's decisions over them).

That these compute what scoring one span at a time computes is tests/models/test_incremental_equality.py (against
a frozen copy of the model before the batched decisions); that a segment's device work does not grow with its spans
is tests/models/test_incremental_device_work.py.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import coref_pipeline.models.incremental.decisions as decisions_module
import coref_pipeline.models.incremental.scoring as scoring_module
from coref_pipeline.models.baseline import BaselineCorefModel, predicted_clusters
from coref_pipeline.models.config import ConfigError, IncrementalConfig
from coref_pipeline.models.incremental import (
    EntityMemory,
    GoldAntecedents,
    IncrementalCorefModel,
    PairFeatures,
    SegmentScores,
    copy_baseline_weights,
)
from coref_pipeline.models.incremental.decisions import span_options
from coref_pipeline.models.spans import bucket_distance
from tests.models.tiny import make_document, tiny_config, tiny_encoder, tiny_tensors
from tests.tolerances import (
    assert_parts_reordered_close,
    assert_reordered_close,
    ffnn_terms,
    head_terms,
    same_spans_or_near_tie,
)


def incremental_config(**overrides) -> IncrementalConfig:
    baseline = tiny_config().to_dict()
    return IncrementalConfig.from_baseline(baseline, {"dropout_rate": 0.0, **overrides})


def spread_pair_weights(model: IncrementalCorefModel, std: float = 0.3, seed: int = 0) -> None:
    """Redraw the pair scorer and coarse weights wider than the initialisation, so entities score apart."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        modules = [model.pair_scorer] + ([model.src_projection] if model.uses_coarse else [])
        for module in modules:
            for parameter in module.parameters():
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)


def batching_model(**overrides) -> IncrementalCorefModel:
    """The same tiny model (weights spread) with ``overrides``."""
    torch.manual_seed(0)
    values = dict(top_span_ratio=0.5, threshold=1.0) | overrides
    model = IncrementalCorefModel(incremental_config(**values), tiny_encoder(seed=1))
    spread_pair_weights(model)
    return model


def memory_of_vectors(embeddings: torch.Tensor, spans: list[tuple[int, int]], **settings) -> EntityMemory:
    """A memory whose base rows are one entity per span, with ``embeddings`` ``[n, D]`` (projections and priors
    zeros): the entities an earlier segment left."""
    memory = EntityMemory(**settings)
    table = memory.begin_segment(embeddings, torch.zeros(len(spans), 2), torch.zeros(len(spans)))
    for position, span in enumerate(spans):
        memory.add(span, table.span_row(position))
    memory.end_segment()
    return memory


def segment_values(
    model: IncrementalCorefModel,
    memory: EntityMemory,
    spans: list[tuple[int, int]],
    embeddings: torch.Tensor,
    mention_scores: torch.Tensor,
    features: PairFeatures,
) -> SegmentScores:
    """A segment's scores as its decisions read them: the read spans ``spans`` (``embeddings`` ``[n, D]``,
    ``mention_scores`` ``[n]``) against the memory's columns, after the static pass (every pair, no K)."""
    weights = model.pair_scorer.first_layer_parts()
    projections = model.pair_scorer.project_candidates(embeddings, weights)
    table = memory.begin_segment(embeddings, projections, mention_scores)
    sources = model.src_projection(embeddings) if model.uses_coarse else None
    scores = SegmentScores(
        model,
        memory,
        table,
        spans,
        embeddings,
        model.pair_scorer.project_targets(embeddings, weights),
        sources,
        mention_scores,
        features,
        weights,
    )
    scores.static_pass(memory, spans, None)
    return scores


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
    memory = memory_of_vectors(torch.randn(3, d), [(0, 0), (7, 7), (30, 30)])
    with torch.no_grad():
        memory.base_projections = model.pair_scorer.project_candidates(memory.base_embeddings)
        mention = torch.randn(d)
        scores = segment_values(model, memory, [(40, 40)], mention[None], torch.zeros(1), PairFeatures(2))
        fast = torch.tensor(scores.value[0, :3])
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
    # The span's own row (the entity it may start) is no option of its own: not scored.
    assert np.isnan(scores.value[0, 3]) and scores.flat[0, 3] == -1


def fixed_alpha(model: IncrementalCorefModel, alpha: float) -> None:
    """Make the update network output a constant: a = sigmoid(logit(alpha))."""
    with torch.no_grad():
        model.alpha.output.weight.zero_()
        model.alpha.output.bias.fill_(torch.logit(torch.tensor(alpha)).item())


def cosine_pair_scores(targets, candidates, index, *args, **kwargs) -> torch.Tensor:
    """A hand-built PAIRSCORE for ``PairScorer.scores``: 10 cos(m, e) - 5 (attach when alike): ``[k, c]``."""
    chosen = candidates[index]  # [k, c, D]
    return 10 * torch.cosine_similarity(targets.unsqueeze(1), chosen, dim=2) - 5


def test_greedy_decisions_on_a_hand_built_case(monkeypatch):
    model = IncrementalCorefModel(
        incremental_config(score="paper", evict_distance=10**9, evict_singleton_distance=10**9), tiny_encoder()
    )
    model.eval()
    fixed_alpha(model, 0.25)
    monkeypatch.setattr(model.pair_scorer, "scores", cosine_pair_scores)
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
        memory.end_segment()
        model.resolve_spans(memory, [7, 9, 12], [7, 10, 12], embeddings[3:], torch.zeros(3), PairFeatures(0))
        memory.end_segment()
    assert memory.clusters() == [[(0, 0), (5, 5), (12, 12)], [(2, 3), (9, 10)]]
    assert len(memory.mentions) == 3  # a, b, c; c stays a singleton (not in the output)
    # e <- a e + (1 - a) m with a = 0.25: a then a_variant then a.
    expected = 0.25 * (0.25 * a + 0.75 * a_variant) + 0.75 * a
    entity = memory.base_embeddings[memory.base_row[memory.entity_of_span[(0, 0)]]]
    torch.testing.assert_close(entity, expected)
    # The threshold decides new entities: above every score, nothing attaches.
    high = IncrementalCorefModel(incremental_config(score="paper", threshold=100.0), tiny_encoder()).eval()
    monkeypatch.setattr(high.pair_scorer, "scores", cosine_pair_scores)
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
    """Entities given as (last mention start, number of mentions); entity ``i``'s vectors are all ``i``."""
    memory = EntityMemory()
    embeddings = torch.arange(len(entities), dtype=torch.float).unsqueeze(1).expand(-1, 4)  # [n, 4]
    table = memory.begin_segment(embeddings, torch.zeros(len(entities), 2), torch.zeros(len(entities)))
    for index, (last, size) in enumerate(entities):
        spans = [(last - (size - 1 - k), last - (size - 1 - k)) for k in range(size)]  # the last is (last, last)
        row = table.span_row(index)
        entity_id = memory.add(spans[0], row)
        for span in spans[1:]:
            memory.update(entity_id, span, row, row)
    memory.end_segment()
    return memory


def test_eviction_removes_exactly_the_entities_the_policy_names():
    # position 2000: singletons more than 600 behind go, any entity more than 1200 behind goes.
    entities = [(1500, 1), (1399, 1), (1401, 1), (900, 3), (799, 3), (801, 2), (1990, 1)]
    memory = memory_with(entities)
    gone = memory.end_segment(2000, singleton_distance=600, distance=1200)
    assert sorted(gone) == [1, 4]  # 601 behind with one mention; 1201 behind with three
    assert memory.base_ids == [0, 2, 3, 5, 6]
    assert memory.base_embeddings[:, 0].tolist() == [0.0, 2.0, 3.0, 5.0, 6.0]
    # Evicted entities keep their mentions for the output.
    assert len(memory.mentions[4]) == 3 and 4 in memory.evicted and 4 not in memory.active
    # null switches a rule off.
    memory = memory_with(entities)
    assert memory.end_segment(2000, singleton_distance=None, distance=None) == []
    memory = memory_with(entities)
    assert sorted(memory.end_segment(2000, singleton_distance=None, distance=1200)) == [4]


def test_eviction_at_a_segments_end_takes_the_columns_made_in_it_too():
    """Consolidation and eviction in one gather: an entity made in the segment leaves with the others, and the
    columns kept are the base rows not superseded, then the fresh ones, each with the vectors of its row."""
    memory = memory_with([(100, 1), (1990, 2)])  # entities 0 and 1
    embeddings = torch.tensor([[7.0] * 4, [8.0] * 4])
    table = memory.begin_segment(embeddings, torch.zeros(2, 2), torch.tensor([0.5, 0.25]))
    new = memory.add((150, 150), table.span_row(0))  # made in the segment, far behind at its end
    memory.update(1, (1995, 1995), table.span_row(1), table.span_row(1))  # entity 1 takes row 1's vectors
    assert memory.end_segment(2000, singleton_distance=600, distance=None) == [0, new]
    assert memory.base_ids == [1] and memory.base_embeddings.tolist() == [[8.0] * 4]
    assert memory.base_priors.tolist() == [0.25] and memory.table is None


def test_eviction_distance_is_measured_from_the_midpoint_of_the_most_recent_mention():
    memory = EntityMemory()
    table = memory.begin_segment(torch.zeros(2, 4), torch.zeros(2, 2), torch.zeros(2))
    for position, span in enumerate(((1390, 1410), (1380, 1400))):  # midpoints 1400 and 1390
        memory.add(span, table.span_row(position))
    memory.end_segment()
    # At 2000 with 600: the first is 600 behind (stays, though its start is 610 behind), the second 610.
    assert memory.end_segment(2000, singleton_distance=600, distance=None) == [1]


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
    table = memory.begin_segment(torch.zeros(2, 2), torch.zeros(2, 2), torch.zeros(2))
    first = memory.add((1, 1), table.span_row(0))
    second = memory.add((3, 3), table.span_row(1))  # wrongly a new entity
    assert gold.target_ids((5, 5), memory, all_antecedents=False) == [second]
    assert gold.target_ids((5, 5), memory, all_antecedents=True) == [second, first]
    assert gold.target_ids((1, 1), memory, all_antecedents=False) == []  # first mention: new entity
    assert gold.target_ids((7, 7), memory, all_antecedents=True) == []  # its cluster has no earlier mention
    assert gold.target_ids((2, 2), memory, all_antecedents=True) == []  # not a gold mention
    # The most recent antecedent evicted (or missed): the new-entity option is gold.
    memory.end_segment()
    memory.mentions[second][-1] = (-5000, -5000)  # its mention now far behind
    memory.end_segment(0, singleton_distance=600, distance=None)
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


@pytest.mark.parametrize("window", [1, 16])
def test_training_backpropagates_per_window_of_segments_and_detaches(window):
    """The losses of a window of segments (the encoder's batch) are summed and yielded together: one backward
    pass per window, each segment's entities detached at its end."""
    torch.manual_seed(0)
    model = IncrementalCorefModel(incremental_config(), tiny_encoder())
    model.encoder.segment_batch_size = window
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
    assert len(segment_losses) == (document.num_segments if window == 1 else 1)
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
    """Each segment's loss (a window of one segment each: the encoder's batch of one), backpropagated."""
    model.encoder.segment_batch_size = 1
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
            found = model.segment_spans(document, model.encode_segment(document, index), offset)
            starts, ends, scores = found.starts, found.ends, found.mention_scores
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


def antecedent_values(
    model: IncrementalCorefModel,
    i: int,
    antecedents: list[int],
    spans: list[tuple[int, int]],
    embeddings: torch.Tensor,
    mention_scores: torch.Tensor,
    features: PairFeatures,
    consolidated: bool,
) -> torch.Tensor:
    """Span ``i``'s values against one-mention entities of each of ``antecedents``: entities carried over
    from an earlier segment (``consolidated``, base rows) or made by earlier spans of its own (its segment's
    rows of those spans): ``[len(antecedents)]``."""
    memory = EntityMemory()
    if consolidated:
        projections = model.pair_scorer.project_candidates(embeddings[antecedents])
        table = memory.begin_segment(embeddings[antecedents], projections, mention_scores[antecedents])
        for position, j in enumerate(antecedents):
            memory.add(spans[j], table.span_row(position))
        memory.end_segment()
        scores = segment_values(model, memory, [spans[i]], embeddings[[i]], mention_scores[[i]], features)
        return torch.from_numpy(scores.value[0, : len(antecedents)])
    read = antecedents + [i]  # the antecedents read first, in the segment
    scores = segment_values(model, memory, [spans[j] for j in read], embeddings[read], mention_scores[read], features)
    return torch.from_numpy(scores.value[len(antecedents), : len(antecedents)])


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
        found = model.segment_spans(document, model.encode_segment(document, 0), 0)
    starts, ends, embeddings, mention_scores = found.starts, found.ends, found.embeddings, found.mention_scores
    # One segment: the same kept spans, embeddings and mention scores as the baseline's.
    assert torch.equal(starts, output.top_span_starts) and torch.equal(ends, output.top_span_ends)
    torch.testing.assert_close(embeddings, output.top_span_emb)
    spans = list(zip(starts.tolist(), ends.tolist(), strict=True))
    assert found.spans == spans  # known on the host as kept
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
            with torch.no_grad():
                arguments = (i, antecedents, spans, embeddings, mention_scores, features, consolidated)
                calibrated = antecedent_values(model, *arguments)
                paper = antecedent_values(forms["paper"], *arguments)
            # One entity row against the baseline's [k, c] pairs: the fine FFNN in other GEMM shapes, and the
            # coarse term (a projection of g, then its product with g) summed in other orders.
            terms = ffnn_terms(model.pair_scorer.slow_antecedent_scores) + 2 * model.span_dim
            assert_reordered_close(calibrated + mention_scores[i], expected, terms)
            # The paper's form lacks exactly the entity's mention score and the coarse term.
            with torch.no_grad():
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
        memory.end_segment()
        assert memory.base_priors.tolist() == expected


def test_the_options_are_the_k_best_columns_by_coarse_score_and_the_gold_ones():
    coarse = np.array([0.5, 3.0, -1.0, 2.0, 3.0, 0.0], dtype=np.float32)
    none = np.zeros(6, dtype=bool)
    assert span_options(none, coarse, None, None).all()  # no K: every active column
    assert span_options(none, coarse, 6, None).all()  # K covers them
    # K = 3: the three best by coarse score, the first among equals first.
    assert np.flatnonzero(span_options(none, coarse, 3, None)).tolist() == [1, 3, 4]
    assert np.flatnonzero(span_options(none, coarse, 2, None)).tolist() == [1, 4]
    # In training the gold columns are options whatever their coarse score, within the K.
    gold = np.array([False, False, True, False, False, False])
    assert np.flatnonzero(span_options(gold, coarse, 3, None)).tolist() == [1, 2, 4]
    # More gold columns than K: the gold ones alone.
    many = np.array([True, False, True, False, False, True])
    assert np.flatnonzero(span_options(many, coarse, 2, None)).tolist() == [0, 2, 5]
    # A coarse floor (inference): only the columns above it, after the K.
    assert np.flatnonzero(span_options(none, coarse, None, 0.5)).tolist() == [1, 3, 4]
    assert np.flatnonzero(span_options(none, coarse, 2, 2.0)).tolist() == [1, 4]
    assert np.flatnonzero(span_options(none, coarse, 2, -0.5)).tolist() == [1, 4]
    # The floor is applied first where no column is gold (no sort where few pass it): the same options as the
    # K best and then the floor, ties, -inf (columns not scored) and NaN included.
    generator = np.random.default_rng(0)
    for _ in range(2000):
        count = int(generator.integers(1, 30))
        values = generator.choice([-np.inf, np.nan, -1.0, 0.0, 0.5, 2.0, 3.0], count).astype(np.float32)
        values += generator.choice([0.0, 0.25], count).astype(np.float32)
        limit, floor = int(generator.integers(1, 12)), float(generator.choice([-2.0, 0.0, 0.5, 2.0]))
        unfloored = span_options(np.zeros(count, dtype=bool), values, limit, None)
        assert (
            span_options(np.zeros(count, dtype=bool), values, limit, floor).tolist()
            == (unfloored & (values > floor)).tolist()
        )


def test_the_coarse_floor_is_for_inference_with_the_calibrated_score():
    model = IncrementalCorefModel(incremental_config(min_coarse_score=0.5), tiny_encoder())
    scores = torch.tensor([1.0, -2.0])
    assert model.eval().coarse_floors(scores).tolist() == [-0.5, 2.5]  # F - s_m(m): the pair's whole coarse > F
    assert model.train().coarse_floors(scores) is None  # training scores every column
    assert IncrementalCorefModel(incremental_config(), tiny_encoder()).eval().coarse_floors(scores) is None
    with pytest.raises(ConfigError, match="'min_coarse_score' needs score: calibrated"):
        incremental_config(score="paper", min_coarse_score=0.0)


class PairLog:
    """Counts, on one model, the fine FFNN's calls and the (span, column) pairs they score."""

    def __init__(self, model: IncrementalCorefModel, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[int, bool]] = []  # (pairs, with gradients) of each call
        scores = model.pair_scorer.scores

        def logged(targets, candidates, index, *args, **kwargs):
            self.calls.append((index.numel(), torch.is_grad_enabled()))
            return scores(targets, candidates, index, *args, **kwargs)

        monkeypatch.setattr(model.pair_scorer, "scores", logged)

    @property
    def pairs(self) -> int:
        return sum(pairs for pairs, _ in self.calls)


@pytest.mark.parametrize("limit", [None, 2])
def test_the_coarse_floor_leaves_pairs_out_of_the_fine_ffnn_and_makes_the_same_decisions(monkeypatch, limit):
    """At inference with min_coarse_score the pairs at or below the floor never go through the fine FFNN. A floor
    below every coarse score leaves every pair in; the decisions with a floor are the reference's (the equality
    tests) and differ from those without it here (it changes the options)."""
    document = tiny_tensors(make_document(num_segments=6, seed=6), tiny_config())
    slots = dict(recent_mentions=2, entity_representation=False)
    outputs, logs = {}, {}
    for floor in (None, -1e9, 0.0):
        model = batching_model(max_top_entities=limit, min_coarse_score=floor, **slots).eval()
        logs[floor] = PairLog(model, monkeypatch)
        with torch.no_grad():
            outputs[floor] = model(document)
    assert logs[-1e9].pairs == logs[None].pairs and outputs[-1e9].memory.mentions == outputs[None].memory.mentions
    assert 0 < logs[0.0].pairs < logs[None].pairs


@pytest.mark.parametrize("limit", [None, 2])
@pytest.mark.parametrize("representation", [False, True], ids=["slots", "representations"])
def test_spans_without_a_column_above_the_floor_start_entities_without_weighing_options(
    monkeypatch, limit, representation
):
    """At inference with a coarse floor, a span whose static columns all score at or below its floor has no option
    while the segment holds no version: it starts an entity without the options being gathered. The decisions are
    those that gather every span's options (the shortcut turned off), with entity representations too (versions
    are options the static pass cannot know)."""
    document = tiny_tensors(make_document(num_segments=6, seed=6), tiny_config())
    settings = dict(max_top_entities=limit, min_coarse_score=0.0, recent_mentions=2)
    settings |= (
        dict(entity_representation=True, update="learned") if representation else dict(entity_representation=False)
    )
    gathered = []
    options_of = decisions_module.options_of

    def counted(columns, scores, position, targets):
        gathered.append(position)
        return options_of(columns, scores, position, targets)

    static_pass = scoring_module.SegmentScores.static_pass

    def without_shortcut(self, *args):  # every span weighs its options, as before the shortcut
        static_pass(self, *args)
        self.may_choose = None

    monkeypatch.setattr(decisions_module, "options_of", counted)
    outputs, calls = {}, {}
    for shortcut in (True, False):
        if not shortcut:
            monkeypatch.setattr(scoring_module.SegmentScores, "static_pass", without_shortcut)
        gathered.clear()
        with torch.no_grad():
            outputs[shortcut] = batching_model(**settings).eval()(document)
        calls[shortcut] = len(gathered)
    assert outputs[True].clusters == outputs[False].clusters and len(outputs[True].clusters) >= 2
    assert outputs[True].memory.mentions == outputs[False].memory.mentions
    assert outputs[True].kept_spans == outputs[False].kept_spans
    assert calls[True] < calls[False]  # spans with nothing above the floor skipped the options


def test_with_k_at_least_the_number_of_entities_the_decisions_are_identical(monkeypatch):
    document = tiny_tensors(make_document(num_segments=3), tiny_config())

    monkeypatch.setattr(scoring_module, "INFERENCE_PREFILTER_MARGIN", 0.0)  # each span's K best columns alone

    def decide(limit):
        torch.manual_seed(0)
        model = IncrementalCorefModel(incremental_config(threshold=0.0, max_top_entities=limit), tiny_encoder(seed=1))
        log = PairLog(model, monkeypatch)
        with torch.no_grad():
            return model.eval()(document), log

    unfiltered, every = decide(None)
    entities = unfiltered.memory.max_active  # the most entities ever active at once
    assert unfiltered.clusters and entities >= 2
    filtered, prefiltered = decide(entities)  # K = the number of entities
    assert filtered.clusters == unfiltered.clusters and filtered.kept_spans == unfiltered.kept_spans
    assert filtered.memory.mentions == unfiltered.memory.mentions
    assert prefiltered.pairs < every.pairs  # the static pass scored each span's best columns only


@pytest.mark.parametrize(
    "margin",
    [0.0, scoring_module.PREFILTER_MARGIN, scoring_module.INFERENCE_PREFILTER_MARGIN],
    ids=["no_margin", "training_margin", "inference_margin"],
)
def test_the_static_pass_scores_each_spans_best_columns_and_the_missing_ones_in_few_rounds(monkeypatch, margin):
    """With K the static pass scores each span's K (+ margin) best static columns; a span that chooses a column
    outside them (when better ones left) has it scored in a round that also scores the later spans' next best
    ones, twice as many each round: rounds stay few, and the decisions are those without the pre-filter's
    shortcut (the equality tests: the reference)."""
    monkeypatch.setattr(scoring_module, "INFERENCE_PREFILTER_MARGIN", margin)  # the model runs at inference
    document = tiny_tensors(make_document(num_segments=6, seed=6), tiny_config())
    rounds, segments = [], []  # (rounds before, the table's static rows) at each round; (spans, pairs) per pass
    score_missing, static_pass = SegmentScores.score_missing, SegmentScores.static_pass

    def counted_missing(self, *args):
        rounds.append((self.rounds, self.table.num_static))
        return score_missing(self, *args)

    def counted_static(self, memory, spans, gold):
        before = log.pairs
        static_pass(self, memory, spans, gold)
        segments.append((len(spans), log.pairs - before))

    monkeypatch.setattr(SegmentScores, "score_missing", counted_missing)
    monkeypatch.setattr(SegmentScores, "static_pass", counted_static)
    model = batching_model(max_top_entities=2, recent_mentions=2, entity_representation=False).eval()
    log = PairLog(model, monkeypatch)
    with torch.no_grad():
        output = model(document)
    assert len(output.clusters) >= 3
    scored = 2 + int(np.ceil(2 * margin))  # K + margin
    assert len(segments) == document.num_segments
    assert all(pairs <= scored * spans for spans, pairs in segments)
    # A round doubles what each later span has scored: a segment has at most log2(its static rows / scored) + 1.
    assert all(before < 1 + np.ceil(np.log2(rows / scored)) for before, rows in rounds)
    if not margin:  # the next in line outside the K: scored in rounds
        assert rounds
    assert len(log.calls) <= len(segments) + len(rounds)


def test_in_chunks_of_pairs_the_same_decisions(monkeypatch):
    """With a tiny chunk limit the static pass's pairs go through the fine FFNN one at a time (at inference; mention
    columns only, so every pair is the static pass's): the same decisions."""
    document = tiny_tensors(make_document(num_segments=6, seed=6), tiny_config())
    outputs, logs, default = {}, {}, scoring_module.BASE_SCORE_CHUNK_ELEMENTS
    for chunk in (default, 1):
        monkeypatch.setattr(scoring_module, "BASE_SCORE_CHUNK_ELEMENTS", chunk)
        model = batching_model(score="calibrated", recent_mentions=2, entity_representation=False).eval()
        logs[chunk] = PairLog(model, monkeypatch)
        with torch.no_grad():
            outputs[chunk] = model(document)
    whole, chunked = outputs[default], outputs[1]
    assert chunked.clusters == whole.clusters and chunked.memory.mentions == whole.memory.mentions
    assert logs[1].pairs == logs[default].pairs and len(logs[1].calls) > len(logs[default].calls)
    assert max(pairs for pairs, _ in logs[1].calls) == 1


def test_recent_mentions_are_kept_as_scoring_columns_of_their_entity():
    """recent_mentions 2: an entity's representation and its two latest mentions; slots leave with the entity."""
    memory = EntityMemory(recent_mentions=2)
    mentions = torch.arange(4, dtype=torch.float).unsqueeze(1).expand(-1, 4)  # [4, 4]: mention i is all i
    table = memory.begin_segment(mentions[:1], torch.zeros(1, 2), torch.zeros(1))
    entity_id = memory.add((0, 0), table.span_row(0))
    assert memory.columns() == [entity_id] and not memory.owner  # one mention: its representation is that mention
    memory.end_segment()
    # The next segment reads mentions 1 to 3; each update's new representation is a version row (all 9).
    table = memory.begin_segment(mentions[1:], -torch.ones(3, 2), torch.tensor([1.0, 2.0, 3.0]))
    for index in (1, 2, 3):
        span = (10 * index, 10 * index)
        version = table.add_version(torch.full((4,), 9.0), torch.ones(2), torch.tensor(float(index)))
        memory.update(entity_id, span, version, table.span_row(index - 1))
        if index == 1:  # the first mention got its slot (from the representation before the update) with the second's
            assert [memory.slot_span[slot] for slot in memory.slots[entity_id]] == [(0, 0), (10, 10)]
            assert set(memory.changed) == {entity_id, *memory.slots[entity_id]}
            assert memory.row_of(memory.slots[entity_id][0]) == 0  # the base row: the first mention's vectors
    slots = memory.slots[entity_id]
    assert [memory.slot_span[slot] for slot in slots] == [(20, 20), (30, 30)]
    assert [memory.entity_of(slot) for slot in slots] == [entity_id, entity_id]
    assert [memory.anchor(slot) for slot in slots] == [(20, 20), (30, 30)] and memory.anchor(entity_id) == (30, 30)
    memory.end_segment()
    assert sorted(memory.base_ids) == sorted([entity_id, *slots])  # dropped slots left at the consolidation
    rows = {column_id: row for row, column_id in enumerate(memory.base_ids)}
    assert memory.base_embeddings[rows[slots[0]]].tolist() == [2.0] * 4  # the mention's own embedding
    assert memory.base_priors[rows[slots[1]]] == 3.0 and memory.base_projections[rows[slots[1]]].tolist() == [-1, -1]
    assert memory.base_embeddings[rows[entity_id]].tolist() == [9.0] * 4  # the representation
    assert memory.base_priors[rows[entity_id]] == 3.0  # the most recent mention's score
    assert memory.scored_columns([entity_id]) == sorted(rows.values())
    assert memory.end_segment(10_000, singleton_distance=None, distance=100) == [entity_id]
    assert memory.base_ids == [] and not memory.owner and not memory.slot_span and not memory.slots
    assert memory.mentions[entity_id] == [(0, 0), (10, 10), (20, 20), (30, 30)]


def test_without_entity_representations_only_mention_columns_are_scored():
    memory = EntityMemory(recent_mentions=1, score_representations=False)
    table = memory.begin_segment(torch.stack([torch.zeros(4), torch.ones(4)]), torch.zeros(2, 2), torch.zeros(2))
    first = memory.add((0, 0), table.span_row(0))
    second = memory.add((5, 5), table.span_row(1))
    assert len(memory.columns()) == 4 and len(memory.changed) == 2  # each entity: representation + slot
    masked = set(memory.masked_columns(4))
    scored = [column for column in range(4) if column not in masked]
    assert [memory.entity_of(memory.columns()[column]) for column in scored] == [first, second]
    assert memory.live_fresh() == ([table.span_row(0), table.span_row(1)], [first, second])  # the slots
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

    That the decisions are still the baseline's is
    test_entities_scored_by_all_their_mentions_make_the_baselines_decisions.
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


def test_the_passes_score_only_the_spans_negative_sampling_keeps(monkeypatch):
    """negative_sample_rate < 1 in training: the spans are drawn before the segment's passes, which then score
    exactly the spans read afterwards (every gold span, some others), not every kept span."""
    document = tiny_tensors(make_document(num_segments=6, seed=6), tiny_config())
    model = batching_model(negative_sample_rate=0.3, max_top_entities=2).train()
    segments = []  # per segment: kept spans, the spans its passes scored and its decisions read
    static_pass, resolve_spans = SegmentScores.static_pass, model.resolve_spans

    def logged_static_pass(self, memory, spans, gold):
        segments[-1]["read"] = list(spans)
        return static_pass(self, memory, spans, gold)

    def logged_resolve_spans(memory, starts, ends, *args, **kwargs):
        segments.append({"kept": list(zip(starts, ends, strict=True)), "read": None})
        return resolve_spans(memory, starts, ends, *args, **kwargs)

    monkeypatch.setattr(SegmentScores, "static_pass", logged_static_pass)
    monkeypatch.setattr(model, "resolve_spans", logged_resolve_spans)
    torch.manual_seed(3)
    for loss in model.training_losses(document):
        loss.backward()
    gold = GoldAntecedents(document)
    assert len(segments) == document.num_segments
    for segment in segments:
        assert set(segment["read"]) <= set(segment["kept"])
        assert {span for span in segment["kept"] if gold.is_gold(span)} <= set(segment["read"])
    kept = sum(len(segment["kept"]) for segment in segments)
    read = sum(len(segment["read"]) for segment in segments)
    assert any(gold.is_gold(span) for segment in segments for span in segment["read"])
    assert read < 0.7 * kept  # the sampled-out spans were not scored


def gold_rows_scored_late(model: IncrementalCorefModel, document, monkeypatch) -> int:
    """How many of the gold options that are base rows a training pass scores in rounds, not in the static pass."""
    score_missing, count = SegmentScores.score_missing, 0

    def logged_missing(self, memory, spans, gold, position, rows):
        nonlocal count  # base rows only: the segment's own spans join their entities during it
        targets = set(gold.target_ids(spans[position], memory, True))
        count += sum(row < self.num_base and memory.entity_of(memory.base_ids[row]) in targets for row in rows)
        return score_missing(self, memory, spans, gold, position, rows)

    monkeypatch.setattr(SegmentScores, "score_missing", logged_missing)
    torch.manual_seed(5)
    for loss in model.training_losses(document):
        loss.backward()
    return count


@pytest.mark.parametrize(
    "slots",
    [dict(max_top_entities=2), dict(max_top_entities=5, recent_mentions=2, entity_representation=False)],
    ids=["representation", "2_mentions"],
)
def test_training_scores_the_gold_columns_in_the_segments_static_pass(monkeypatch, slots):
    """In training each span's gold options among the entities at its segment's start are ranked first in the
    segment's static pass (they would otherwise be missing when chosen, and scored in a round); without that
    ranking some are."""
    document = tiny_tensors(make_document(num_segments=12, seed=3), tiny_config())
    values = dict(score="calibrated", loss="all_antecedents", negative_sample_rate=0.5) | slots
    model = batching_model(**values).train()
    assert gold_rows_scored_late(model, document, monkeypatch) == 0
    model = batching_model(**values).train()
    monkeypatch.setattr(SegmentScores, "gold_rows", lambda *args: {})
    assert gold_rows_scored_late(model, document, monkeypatch) > 0


MENTION_SLOTS = [
    dict(),
    dict(recent_mentions=2),
    dict(recent_mentions=2, entity_representation=False),
    dict(recent_mentions=2, pair_features="baseline", max_top_entities=3),
]


@pytest.mark.parametrize("slots", MENTION_SLOTS, ids=["representation", "and_2_mentions", "2_mentions", "baseline"])
def test_the_gold_options_are_every_scored_column_of_the_gold_entities(monkeypatch, slots):
    """At every training decision the options marked gold are the columns ``scored_columns`` finds for the gold
    entities (scanning the memory), superseded base rows and dropped slots excluded, and all of them are options."""
    document = tiny_tensors(make_document(num_segments=8, seed=6), tiny_config())
    values = dict(loss="all_antecedents", teacher_forcing_rate=1.0, top_span_ratio=1.0)  # gold links followed
    model = batching_model(**values, **slots).train()
    options_of, checked = decisions_module.options_of, []

    def checking(columns, scores, position, targets):
        rows, entities, required = options_of(columns, scores, position, targets)
        memory = columns.memory
        found = sorted(memory.row_of(memory.columns()[column]) for column in memory.scored_columns(targets))
        assert sorted(rows[required].tolist()) == found
        checked.append((len(found), bool(memory.superseded), bool(memory.dropped)))
        return rows, entities, required

    monkeypatch.setattr(decisions_module, "options_of", checking)
    for loss in model.training_losses(document):
        loss.backward()
    assert sum(found > 0 for found, _, _ in checked) >= 5  # gold entities found
    assert any(superseded for _, superseded, _ in checked)
    if slots.get("recent_mentions"):
        assert any(found > 1 for found, _, _ in checked) and any(dropped for _, _, dropped in checked)


@pytest.mark.parametrize("slots", MENTION_SLOTS, ids=["representation", "and_2_mentions", "2_mentions", "baseline"])
def test_the_active_columns_kept_between_decisions_are_those_the_memory_lists_afresh(monkeypatch, slots):
    """``ActiveColumns`` reads the fresh columns again only where the memory changed them other than by appending
    (``fresh_changes``): at every decision its columns are those a new reading of the memory gives, through
    updates, superseded base rows and slots dropped within a segment."""
    document = tiny_tensors(make_document(num_segments=8, seed=6), tiny_config())
    model = batching_model(top_span_ratio=1.0, threshold=-1.0, **slots).eval()  # many joins: slots dropped
    current, checked = decisions_module.ActiveColumns.current, []

    def checking(columns):
        rows, entities = current(columns)
        memory = columns.memory
        base_rows, base_entities = memory.live_base()
        fresh_rows, fresh_entities = memory.live_fresh()
        assert rows.tolist() == [row for row in base_rows if row not in memory.superseded] + fresh_rows
        assert (
            entities.tolist()
            == [entity for row, entity in zip(base_rows, base_entities, strict=True) if row not in memory.superseded]
            + fresh_entities
        )
        checked.append((memory.fresh_changes, len(memory.fresh_ids)))
        return rows, entities

    monkeypatch.setattr(decisions_module.ActiveColumns, "current", checking)
    with torch.no_grad():
        model(document)
    changes = [count for count, _ in checked]
    assert len(checked) >= 50 and len(set(changes)) > 8  # the count moved within segments, not only at their ends
    if slots.get("recent_mentions"):  # fresh slots dropped: a column left the middle of the fresh list
        assert any(later < earlier for (_, earlier), (_, later) in zip(checked, checked[1:], strict=False))


def test_a_segments_tables_cast_once_for_the_fine_ffnn_give_the_values_of_each_pair_cast(monkeypatch):
    """At inference with the pair scorer in bf16 (``computing_in``) a segment casts the rows its fine-FFNN passes
    gather once (``ScoredTables``); ``scores`` casts each gathered row to bf16 anyway, so every value and decision
    is the same bit for bit as with the fp32 tables gathered per pair, and differs from fp32's."""
    document = tiny_tensors(make_document(num_segments=6, seed=4), tiny_config())
    values = dict(score="calibrated", recent_mentions=2, entity_representation=False, max_top_entities=3)
    model = batching_model(**values).eval()
    scorer, record, found, outputs = model.pair_scorer, SegmentScores._record, {}, {}
    for mode in ("once", "per_pair", "fp32"):
        found[mode] = []

        def recording(scores, positions, rows, values, host, into=found[mode]):
            into.append((positions.copy(), rows.copy(), host.copy()))
            record(scores, positions, rows, values, host)

        with monkeypatch.context() as patch, torch.no_grad():
            patch.setattr(SegmentScores, "_record", recording)
            if mode == "per_pair":  # SegmentScores keeps its fp32 tables: scores casts each pair's rows
                patch.setattr(scorer, "scoring_dtype", lambda like: like.dtype)
            with scorer.computing_in(None if mode == "fp32" else torch.bfloat16):
                outputs[mode] = model(document)
    assert len(found["once"]) >= 6
    for (positions, rows, host), (same_positions, same_rows, same_host) in zip(
        found["once"], found["per_pair"], strict=True
    ):
        assert np.array_equal(positions, same_positions) and np.array_equal(rows, same_rows)
        assert np.array_equal(host, same_host)
    assert outputs["once"].clusters == outputs["per_pair"].clusters
    assert not all(np.array_equal(ours[2], fp32[2]) for ours, fp32 in zip(found["once"], found["fp32"], strict=False))


@pytest.mark.parametrize("slots", [dict(), dict(recent_mentions=2, entity_representation=False)], ids=["repr", "slots"])
def test_an_already_encoded_document_gives_the_same_decisions(slots):
    """The model's one call of its encoder (``encode_segment``) can be skipped: the document's encoder outputs
    ``[num_subtokens, H]``, computed elsewhere (several documents in one pass), give the same clusters."""
    document = tiny_tensors(make_document(num_segments=4, seed=2), tiny_config())
    model = batching_model(**slots).eval()
    with torch.no_grad():
        encoded = model.encoder(document.input_ids, document.attention_mask)  # [num_subtokens, H]
        assert encoded.shape[0] == document.num_tokens
        direct, given = model(document), model(document, encoded)
    assert given.clusters == direct.clusters and given.memory.mentions == direct.memory.mentions
    assert len(direct.clusters) >= 2


@pytest.mark.parametrize("overlapping", [True, False])
def test_without_overlapping_antecedents_no_entity_holds_two_overlapping_mentions(overlapping):
    """overlapping_antecedents: false (the baseline's, taken by the incremental model): a span joins no entity with
    a mention overlapping it; true (the original's) lets the same weights put overlapping spans in one entity."""
    from coref_pipeline.models.config import OWN_CHOICE_KEYS

    assert "overlapping_antecedents" in OWN_CHOICE_KEYS
    config = IncrementalConfig.from_baseline(
        tiny_config(overlapping_antecedents=overlapping, max_span_width=4).to_dict(),
        {"dropout_rate": 0.0, "top_span_ratio": 1.0, "threshold": -1e6},  # every kept span joins an entity
    )
    assert config.overlapping_antecedents is overlapping  # the baseline's, unless told
    torch.manual_seed(0)
    model = IncrementalCorefModel(config, tiny_encoder(seed=1)).eval()
    with torch.no_grad():
        clusters = model(tiny_tensors(make_document(num_segments=3, seed=5), config)).clusters
    overlapping_pairs = [
        (a, b)
        for cluster in clusters
        for i, a in enumerate(cluster)
        for b in cluster[i + 1 :]
        if a[0] <= b[1] and b[0] <= a[1]
    ]
    assert bool(overlapping_pairs) is overlapping, clusters


@pytest.mark.parametrize(
    "overrides",
    [dict(), dict(read_last_sentence=False), dict(recent_mentions=2, entity_representation=False)],
    ids=["defaults", "without_last_sentence", "slots"],
)
@pytest.mark.parametrize("window_subtokens", [None, 30], ids=["one_pass", "passes_of_30"])
def test_a_group_reads_its_one_segment_documents_spans_together_and_decides_each_as_alone(
    monkeypatch, overrides, window_subtokens
):
    """``forward_group``: the kept spans of a group's documents of one segment read in one pass (or in passes of at
    most ``span_window_subtokens``), each document's as ``span_windows`` reads it alone from the same encoder output:
    the same spans (but where two candidates' mention scores lie within float32's bound: pruning ranks them), their
    embeddings, mention scores and the pair scorer's projections of them (computed for the group's spans together)
    within that bound (the products come in other shapes); a document of several
    segments read as alone. Each document's decisions then equal its own alone: an
    argmax agrees unless its two best options lie within rounding, and these seeded documents have none that close
    (as in tests/models/test_incremental_equality.py)."""
    import coref_pipeline.models.incremental.model as model_module

    model = batching_model(**overrides).eval()
    if window_subtokens is not None:  # SPAN_WINDOW_ELEMENTS giving passes of about two of these documents
        config = model.config
        elements = window_subtokens * config.max_span_width * int(config.ffnn_size)
        monkeypatch.setattr(model_module, "SPAN_WINDOW_ELEMENTS", elements)
        assert model.span_window_subtokens == window_subtokens
    shapes = [(1, 16), (1, 14), (3, 16), (1, 16), (1, 12)]  # (segments, at most subtokens a segment)
    documents = [
        tiny_tensors(
            make_document(f"nw/g_{index}", seed=index + 3, num_segments=segments, seg_len=length), tiny_config()
        )
        for index, (segments, length) in enumerate(shapes)
    ]
    with torch.no_grad():
        hidden = [model.encoder(document.input_ids, document.attention_mask) for document in documents]
        read_passes = []  # each pass's documents and subtokens
        window_spans = model.window_spans

        def recorded(*args):
            read_passes.append((len(args[3]) - 1, args[3][-1]))
            return window_spans(*args)

        monkeypatch.setattr(model, "window_spans", recorded)
        found = model.group_spans(documents, hidden)
        together = model.forward_group(documents, hidden)
        monkeypatch.undo()
        assert sorted(found) == [0, 1, 3, 4]  # the one-segment documents
        passes = read_passes[: len(read_passes) // 2]  # group_spans's (forward_group reads them again)
        assert sum(count for count, _ in passes) == 4
        if window_subtokens is None:
            assert len(passes) == 1
        else:
            assert len(passes) > 1 and all(tokens <= window_subtokens for _, tokens in passes)
        terms, linked = head_terms(model), 0
        for position, (document, encoded, output) in enumerate(zip(documents, hidden, together, strict=True)):
            alone = model(document, encoded)
            if position in found:
                segment = model.segment_outputs(document, encoded)
                spans = model.span_windows(document, segment)(0, 0)
                assert spans.spans
                starts, ends = model.candidate_spans(document, slice(0, document.num_tokens))
                scores = model.span_scorer.candidate_scores(segment(0), starts, ends).scores  # [candidates] alone
                crossing = model.config.crossing_spans
                if not same_spans_or_near_tie(
                    found[position].spans, spans.spans, (scores, starts, ends), terms, crossing
                ):
                    continue  # a near tie in the mention ranking tipped: what reads the spans differs
                assert torch.equal(found[position].starts, spans.starts)
                assert torch.equal(found[position].ends, spans.ends)
                assert_reordered_close(found[position].embeddings, spans.embeddings, terms)
                assert_reordered_close(found[position].mention_scores, spans.mention_scores, terms)
                # the pair scorer's projections of the group's kept spans, computed together: as of its own alone
                own = model.span_projections(spans.embeddings)
                assert_parts_reordered_close(found[position].projections, own, terms)
            assert output.clusters == alone.clusters and output.kept_spans == alone.kept_spans
            assert output.memory.mentions == alone.memory.mentions
            linked += len(alone.clusters)
    assert linked >= 3  # decisions to see


def test_a_group_is_predicted_in_evaluation_mode_only():
    model = batching_model()
    document = tiny_tensors(make_document(num_segments=1), tiny_config())
    encoded = model.encoder(document.input_ids, document.attention_mask)
    with pytest.raises(RuntimeError, match="evaluation mode"):
        model.forward_group([document, document], [encoded, encoded])
