"""The scorers shared by both models: the pair scorer's first layer under mixed precision."""

from __future__ import annotations

import torch

from coref_pipeline.models.baseline import BaselineCorefModel

from .tiny import tiny_config, tiny_encoder


def test_the_pair_scorers_first_layer_parts_are_cast_once_under_autocast_with_the_same_scores_and_gradients():
    torch.manual_seed(0)
    scorer = BaselineCorefModel(tiny_config(), tiny_encoder(seed=1)).pair_scorer
    weight = scorer.slow_antecedent_scores.hidden[0].weight
    d = scorer.span_dim
    targets, candidates = torch.randn(3, d), torch.randn(5, d)
    index = torch.tensor([[0, 1, 2], [1, 2, 3], [2, 3, 4]])
    features = torch.randn(3, 3, scorer.feature_size)
    assert all(part.dtype == torch.float32 for part in scorer.first_layer_parts())  # no autocast: as stored
    results = []
    for parts in ("cast once", "views"):  # views: each matmul casts its part, as autocast does unasked
        scorer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            if parts == "cast once":
                split = scorer.first_layer_parts()
                assert all(part.dtype == torch.bfloat16 for part in split)
            else:
                split = weight.split([d, d, d, scorer.feature_size], dim=1)
            scores = scorer.scores(targets, candidates, index, features, parts=split)  # [3, 3]
        scores.sum().backward()
        results.append((scores.detach(), weight.grad.clone()))
    (once, once_grad), (views, views_grad) = results
    assert torch.equal(once, views)
    assert torch.equal(once_grad, views_grad) and once_grad.abs().sum() > 0
