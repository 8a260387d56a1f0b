"""Training: fitting, save/load, resume after a kill, reproducibility (tiny random encoder)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from coref_pipeline.models.baseline import BaselineCorefModel
from coref_pipeline.models.config import TrainingConfig
from coref_pipeline.pipelines.coref_train.nodes import fit_baseline
from coref_pipeline.predict import CorefModel, score_predictions
from coref_pipeline.training import epoch_order, latest_checkpoint, seed_everything, warmup_then_linear_decay

from .models.tiny import make_document, tiny_config, tiny_encoder, tiny_hf_tokenizer

DOCUMENTS = [make_document(f"nw/d{i}_0", seed=i, num_segments=3) for i in range(3)]


def fresh_model(seed: int = 13) -> BaselineCorefModel:
    seed_everything(seed)
    return BaselineCorefModel(tiny_config(top_span_ratio=0.8, max_span_width=3), tiny_encoder(seed, hidden=64))


def training_config(**overrides) -> TrainingConfig:
    values = dict(
        seed=13,
        num_epochs=80,
        bert_learning_rate=2e-3,
        task_learning_rate=5e-3,
        warmup_ratio=0.0,
        eval_frequency=1000,
        report_frequency=10,
        checkpoint_frequency=1000,
        remove_singletons=False,
    )
    values.update(overrides)
    return TrainingConfig(**values)


def test_overfits_a_few_documents(tmp_path):
    trained = fit_baseline(fresh_model(), tiny_hf_tokenizer(), DOCUMENTS, DOCUMENTS, training_config(), tmp_path)
    predictions = trained.predict_documents(DOCUMENTS, progress=False)
    assert 100 * score_predictions(predictions, remove_singletons=False).conll_f1 >= 95


def test_save_then_load_gives_identical_predictions(tmp_path):
    model = fresh_model()
    trained = CorefModel("baseline", model, tiny_hf_tokenizer())
    trained.save(tmp_path / "model")
    loaded = CorefModel.load(tmp_path / "model")
    assert json.loads((tmp_path / "model" / "coref_config.json").read_text())["model_type"] == "baseline"
    for document in DOCUMENTS:
        a, b = trained.tensorize(document), loaded.tensorize(document)
        assert torch.equal(a.input_ids, b.input_ids)
        model.eval()
        with torch.no_grad():
            assert torch.equal(model(a).top_antecedent_scores, loaded.model(b).top_antecedent_scores)
        assert trained.predict_tensors(a) == loaded.predict_tensors(b)
    assert not list((tmp_path / "model").glob("*.bin")) and not list((tmp_path / "model").glob("*.pt"))


def final_weights(work_dir: Path, **overrides) -> dict[str, torch.Tensor]:
    config = training_config(num_epochs=2, checkpoint_frequency=1, **overrides)
    fit_baseline(fresh_model(), tiny_hf_tokenizer(), DOCUMENTS, DOCUMENTS, config, work_dir)
    checkpoint = latest_checkpoint(work_dir)
    from safetensors.torch import load_file

    return load_file(checkpoint / "model.safetensors")


def test_a_killed_run_resumes_to_the_same_weights(tmp_path):
    uninterrupted = final_weights(tmp_path / "a")
    config = training_config(num_epochs=2, checkpoint_frequency=1)
    with pytest.raises(KeyboardInterrupt):
        fit_baseline(
            fresh_model(), tiny_hf_tokenizer(), DOCUMENTS, DOCUMENTS, config, tmp_path / "b", interrupt_after_step=4
        )
    assert latest_checkpoint(tmp_path / "b").name == "step-0000004"
    # A new process would build the model afresh; the checkpoint restores everything else.
    fit_baseline(fresh_model(seed=99), tiny_hf_tokenizer(), DOCUMENTS, DOCUMENTS, config, tmp_path / "b")
    from safetensors.torch import load_file

    resumed = load_file(latest_checkpoint(tmp_path / "b") / "model.safetensors")
    assert uninterrupted.keys() == resumed.keys()
    for name in uninterrupted:
        assert torch.equal(uninterrupted[name], resumed[name]), name


def test_the_same_seed_gives_the_same_metrics(tmp_path):
    scores = []
    for run in ("a", "b"):
        config = training_config(num_epochs=3)
        trained = fit_baseline(fresh_model(), tiny_hf_tokenizer(), DOCUMENTS, DOCUMENTS, config, tmp_path / run)
        predictions = trained.predict_documents(DOCUMENTS, progress=False)
        scores.append(score_predictions(predictions, remove_singletons=False).to_dict())
    assert scores[0] == scores[1]


def test_a_finished_run_is_not_trained_again(tmp_path, caplog):
    config = training_config(num_epochs=1)
    fit_baseline(fresh_model(), tiny_hf_tokenizer(), DOCUMENTS, DOCUMENTS, config, tmp_path)
    with caplog.at_level("INFO"):
        fit_baseline(fresh_model(), tiny_hf_tokenizer(), DOCUMENTS, DOCUMENTS, config, tmp_path)
    assert "Training already finished" in caplog.text


def test_schedule_and_epoch_order():
    factor = warmup_then_linear_decay(total_steps=100, warmup_steps=10)
    assert [factor(s) for s in (0, 5, 10, 55, 100)] == [0.0, 0.5, 1.0, 0.5, 0.0]
    assert epoch_order(10, seed=1, epoch=0) == epoch_order(10, seed=1, epoch=0)
    assert epoch_order(10, seed=1, epoch=0) != epoch_order(10, seed=1, epoch=1)
    assert sorted(epoch_order(10, seed=1, epoch=3)) == list(range(10))


def test_a_changed_configuration_starts_afresh(tmp_path, caplog):
    fit_baseline(fresh_model(), tiny_hf_tokenizer(), DOCUMENTS, DOCUMENTS, training_config(num_epochs=1), tmp_path)
    with caplog.at_level("INFO"):
        fit_baseline(fresh_model(), tiny_hf_tokenizer(), DOCUMENTS, DOCUMENTS, training_config(num_epochs=2), tmp_path)
    assert "starting a fresh run" in caplog.text and "Training already finished" not in caplog.text
    assert latest_checkpoint(tmp_path).name == f"step-{2 * len(DOCUMENTS):07d}"
