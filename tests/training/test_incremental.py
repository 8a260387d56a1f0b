"""Training the incremental model: overfitting, save/load, resume after a kill, the pipeline's nodes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from coref_pipeline.evaluation.predictions import score_predictions
from coref_pipeline.models.baseline import BaselineCorefModel
from coref_pipeline.models.config import IncrementalConfig, TrainingConfig
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.training import Run, build_incremental, fit, incremental_recipe, seed_everything
from coref_pipeline.training.checkpoints import latest_checkpoint
from tests.models.tiny import make_document, tiny_config, tiny_encoder, tiny_hf_tokenizer
from tests.training.test_baseline import InterruptAfter

DOCUMENTS = [make_document(f"nw/d{i}_0", seed=i, num_segments=3) for i in range(3)]


def fresh_incremental(seed: int = 13, **overrides) -> CorefModel:
    """An incremental model built from a (random) tiny baseline, as the pipeline builds it."""
    seed_everything(seed)
    baseline_config = tiny_config(top_span_ratio=0.8, max_span_width=3)
    baseline = CorefModel(
        "baseline", BaselineCorefModel(baseline_config, tiny_encoder(seed, hidden=64)), tiny_hf_tokenizer()
    )
    values = {"top_span_ratio": 0.8, "dropout_rate": 0.0, **overrides}
    return build_incremental(baseline, IncrementalConfig.from_baseline(baseline_config, values))


def training_config(**overrides) -> TrainingConfig:
    values = dict(
        seed=13,
        num_epochs=60,
        task_learning_rate=3e-3,
        gradient_clip=10.0,
        eval_frequency=1000,
        report_frequency=10,
        checkpoint_frequency=1000,
    )
    values.update(overrides)
    return TrainingConfig(**values)


def train(trained: CorefModel, work_dir: Path, config: TrainingConfig, **kwargs) -> CorefModel:
    recipe = incremental_recipe(trained, config, "start")
    return fit(trained, recipe, DOCUMENTS, DOCUMENTS, config, Run(work_dir, remove_singletons=False, **kwargs))


def test_overfits_a_few_documents(tmp_path):
    config = training_config(num_epochs=25, task_learning_rate=1e-2)
    trained = train(fresh_incremental(top_span_ratio=1.0), tmp_path, config)
    predictions = trained.predict_documents(DOCUMENTS, progress=False)
    assert trained.model_type == "incremental"
    assert 100 * score_predictions(predictions, remove_singletons=False).conll_f1 >= 90


def test_save_then_load_gives_identical_predictions(tmp_path):
    trained = fresh_incremental(threshold=-0.5)  # random weights; some spans attach
    trained.save(tmp_path / "model")
    loaded = CorefModel.load(tmp_path / "model")
    assert loaded.model_type == "incremental" and loaded.config == trained.config
    some_cluster = False
    for document in DOCUMENTS:
        a, b = trained.tensorize(document), loaded.tensorize(document)
        clusters = trained.predict_tensors(a)
        assert clusters == loaded.predict_tensors(b)
        some_cluster |= bool(clusters)
    assert some_cluster
    for name, tensor in trained.model.state_dict().items():
        assert torch.equal(tensor, loaded.model.state_dict()[name]), name


def final_weights(work_dir: Path, interrupt_after_step: int | None = None, seed: int = 13) -> dict[str, torch.Tensor]:
    config = training_config(num_epochs=2, checkpoint_frequency=1, eval_frequency=2)
    train(
        fresh_incremental(seed, negative_sample_rate=0.5, teacher_forcing_rate=0.3, dropout_rate=0.2),
        work_dir,
        config,
        callbacks=[InterruptAfter(interrupt_after_step)] if interrupt_after_step else [],
    )
    return load_file(latest_checkpoint(work_dir) / "model.safetensors")


def test_a_killed_run_resumes_to_the_same_weights(tmp_path):
    # Sampling, teacher forcing and dropout all draw random numbers: the RNG state must resume too.
    uninterrupted = final_weights(tmp_path / "a")
    with pytest.raises(KeyboardInterrupt):
        final_weights(tmp_path / "b", interrupt_after_step=4)
    assert latest_checkpoint(tmp_path / "b").name == "step-0000004"
    resumed = final_weights(tmp_path / "b", seed=99)  # a new process builds the model afresh
    assert uninterrupted.keys() == resumed.keys()
    for name in uninterrupted:
        assert torch.equal(uninterrupted[name], resumed[name]), name
    assert not torch.equal(uninterrupted["alpha.output.weight"], fresh_incremental().model.alpha.output.weight)


def segment_losses(losses_of, document) -> list[float]:
    values = []
    for loss in losses_of(document):
        values.append(float(loss.detach()))
    return values


def test_the_encoder_cache_gives_the_same_losses_and_keeps_to_its_memory_limit():
    from coref_pipeline.training.incremental import EncoderCache

    trained = fresh_incremental()
    model = trained.model.train()
    tensors = [trained.tensorize(document) for document in DOCUMENTS]
    one_document = sum(model.encode_segment(tensors[0], index).numel() * 4 for index in range(tensors[0].num_segments))
    for limit, cached_documents in ((None, 3), (one_document, 1), (0, 0)):
        cache = EncoderCache(model, limit)
        for _ in range(2):  # two epochs: the second reads the cache
            for document in tensors:
                torch.manual_seed(0)
                from_cache = segment_losses(cache.losses, document)
                torch.manual_seed(0)
                assert from_cache == segment_losses(model.training_losses, document)
        assert len(cache.outputs) == 3 * cached_documents and (limit is None or cache.bytes <= limit)
        assert len({doc_key for doc_key, _ in cache.outputs}) == cached_documents


def test_the_encoder_cache_serves_crops_of_a_document_from_the_segments_they_share():
    from coref_pipeline.models.document import crop
    from coref_pipeline.training.incremental import EncoderCache

    trained = fresh_incremental(crop_training_documents=True)  # crops: each segment encoded on its own
    model = trained.model.train()
    whole = trained.tensorize(make_document("nw/long_0", seed=5, num_segments=5))
    cache = EncoderCache(model)
    for first in (0, 2, 1, 2):  # windows of 3 segments that overlap
        window = crop(whole, 3, first)
        torch.manual_seed(0)
        from_cache = segment_losses(cache.losses, window)
        torch.manual_seed(0)
        assert from_cache == segment_losses(model.training_losses, window), first
    assert len(cache.outputs) == 5  # each of the document's segments encoded once
    lengths = whole.attention_mask.sum(dim=1).tolist()
    for index in range(5):
        start = sum(lengths[:index])
        assert torch.equal(cache.outputs[("nw/long_0", start)], model.encode_segment(whole, index))


@pytest.mark.parametrize("crop_documents", [False, True])
def test_crop_training_documents_trains_on_windows_of_max_training_sentences_segments(tmp_path, crop_documents):
    trained = fresh_incremental(crop_training_documents=crop_documents)
    assert trained.config.max_training_sentences == 3
    config = training_config(num_epochs=2)
    recipe = incremental_recipe(trained, config, "start")
    seen: list[tuple[int, int]] = []
    losses = recipe.losses

    def recorded(document):
        seen.append((document.num_segments, document.token_offset))
        return losses(document)

    recipe = replace(recipe, losses=recorded)
    documents = [make_document(f"nw/long{i}_0", seed=i, num_segments=5) for i in range(3)]
    fit(trained, recipe, documents, documents[:1], config, Run(tmp_path, remove_singletons=False))
    assert len(seen) == 6
    if crop_documents:
        assert all(segments == 3 for segments, _ in seen)
        assert len({offset for _, offset in seen}) > 1  # random windows, not always the first
    else:
        assert seen == [(5, 0)] * 6
