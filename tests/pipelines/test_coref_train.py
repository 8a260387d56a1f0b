"""The coref_train pipeline's nodes, with a tiny encoder stored in a local folder (as a hub id would be)."""

from __future__ import annotations

import json

import pytest

from coref_pipeline.evaluation.report import EvaluateSettings, evaluate_predictions
from coref_pipeline.formats.segmentation import SegmentationMismatchError, SegmentationRecord
from coref_pipeline.models.config import ConfigError, baseline_settings
from coref_pipeline.pipelines.coref_train.nodes import train
from coref_pipeline.pipelines.coref_train.pipeline import create_pipeline
from coref_pipeline.pipelines.dev_scores import predict_dev, score_dev
from coref_pipeline.serving.coref_model import CorefModel
from tests.models.tiny import conll_key, make_document, tiny_encoder, tiny_hf_tokenizer


@pytest.fixture
def encoder_dir(tmp_path):
    """A tiny BERT and its tokenizer saved like a downloaded hub model."""
    path = tmp_path / "tiny-bert"
    tiny_encoder(hidden=32).model.save_pretrained(path)
    tiny_hf_tokenizer().save_pretrained(path)
    return path


def params_for(encoder_dir, work_dir, **overrides):
    preset = {
        "encoder": str(encoder_dir),
        "max_segment_len": 16,
        "max_training_sentences": 2,
        "max_span_width": 3,
        "feature_size": 8,
        "ffnn_size": 16,
        "max_top_antecedents": 5,
        "coref_depth": 2,
        "num_epochs": 2,
        "eval_frequency": 3,
        "report_frequency": 2,
        "checkpoint_frequency": 2,
    }
    return {
        "preset": "tiny",
        "overrides": overrides,
        "work_dir": str(work_dir),
        "restart": False,
        "presets": {"tiny": preset},
    }


def documents(split: str) -> list[dict]:
    return [make_document(f"nw/{split}{i}_0", seed=i, num_segments=3) for i in range(2)]


def segmented():
    loaded = {split: documents(split) for split in ("train", "dev")}
    return {f"{split}.english.16": (lambda d=d: d) for split, d in loaded.items()}


def dev_gold():
    """The gold dev CoNLL file of ``segmented()``'s dev documents (the key training and evaluate score against)."""
    return conll_key(documents("dev"))


def segmentation(tokenizer_name: str) -> dict:
    return SegmentationRecord.of(tokenizer_name, tiny_hf_tokenizer(), [16]).to_dict()


def test_train_predict_and_score(encoder_dir, tmp_path):
    params = params_for(encoder_dir, tmp_path / "work")
    model = train(segmented(), segmentation(str(encoder_dir)), params, dev_gold(), False)
    assert isinstance(model, CorefModel) and model.config.coref_depth == 2
    assert (tmp_path / "work" / "best" / "model.safetensors").is_file()
    assert (tmp_path / "work" / "dvclive" / "metrics.json").is_file()
    # a model trained here records this project's candidate rule (import-tf-checkpoint writes the original's)
    saved = json.loads((tmp_path / "work" / "best" / "coref_config.json").read_text())
    assert saved["model"]["special_token_spans"] is False and model.config.special_token_spans is False
    predictions = predict_dev(model, segmented(), segmentation(str(encoder_dir)))
    assert [p["doc_key"] for p in predictions] == ["nw/dev0_0", "nw/dev1_0"]
    assert all("predicted_clusters" in p for p in predictions)
    metrics = score_dev(predictions, dev_gold(), False)
    assert set(metrics) == {"conll_f1", "muc_f1", "bcub_f1", "ceafe_f1", "lea_f1"}
    assert 0 <= metrics["conll_f1"] <= 100
    # The {model}_dev_metrics file holds what `evaluate` computes for the same predictions.
    assert metrics == evaluate_predictions(predictions, dev_gold(), EvaluateSettings()).metrics


def test_data_segmented_with_another_tokenizer_is_refused(encoder_dir, tmp_path, minilm_tokenizer):
    minilm = SegmentationRecord.of("embedded:minilm", minilm_tokenizer, [16]).to_dict()
    with pytest.raises(SegmentationMismatchError) as error:
        train(segmented(), minilm, params_for(encoder_dir, tmp_path / "work"), dev_gold(), False)
    message = str(error.value)
    assert f"segmented with tokenizer 'embedded:minilm', the model uses '{encoder_dir}'" in message
    assert "kedro run --pipelines=segment" in message
    assert not (tmp_path / "work" / "checkpoints").exists()


def test_settings_from_a_preset_with_overrides(encoder_dir, tmp_path):
    params = params_for(encoder_dir, tmp_path, ffnn_size=7, seed=5)
    model, training = baseline_settings(params["presets"], params["preset"], params["overrides"])
    assert (model.ffnn_size, training.seed, model.max_segment_len) == (7, 5, 16)
    with pytest.raises(ConfigError, match=r"unknown coref_train key\(s\) \['ffnn_sise'\]"):
        baseline_settings(params["presets"], "tiny", {"ffnn_sise": 7})
    with pytest.raises(ConfigError, match="unknown preset 'nope'"):
        baseline_settings(params["presets"], "nope")
    with pytest.raises(ConfigError, match=r"model key 'feature_size': 'abc' is not an integer"):
        baseline_settings(params["presets"], "tiny", {"feature_size": "abc"})
    with pytest.raises(ConfigError, match=r"model key 'ffnn_size' must be at least 1, or auto, got 'abc'"):
        baseline_settings(params["presets"], "tiny", {"ffnn_size": "abc"})
    with pytest.raises(ConfigError, match=r"training key 'num_epochs': 'abc' is not an integer"):
        baseline_settings(params["presets"], "tiny", {"num_epochs": "abc"})


def test_presets_extend_a_base_and_state_only_what_differs():
    presets = {"base": {"ffnn_size": 10, "seed": 3}, "mid": {"extends": "base", "seed": 4}, "top": {"extends": "mid"}}
    model, training = baseline_settings(presets, "top", {"max_segment_len": 128})
    assert (model.ffnn_size, training.seed, model.max_segment_len) == (10, 4, 128)
    with pytest.raises(ConfigError, match="extend each other in a cycle: a -> b -> a"):
        baseline_settings({"a": {"extends": "b"}, "b": {"extends": "a"}}, "a")
    with pytest.raises(ConfigError, match="preset 'a' extends 'c', which is not a preset"):
        baseline_settings({"a": {"extends": "c"}}, "a")


def test_the_committed_presets_resolve_to_the_originals():
    import yaml

    from tests.paths import PROJECT_ROOT

    params = yaml.safe_load((PROJECT_ROOT / "conf/base/parameters_coref_train.yml").read_text())["coref_train"]
    resolved = {name: baseline_settings(params["presets"], name) for name in params["presets"]}
    # experiments.conf (mandarjoshi90/coref): segment length, crop, learning rates of each released model.
    expected = {
        "bert_base": (128, 11, 1e-5, 2e-4),
        "bert_large": (384, 3, 1e-5, 2e-4),
        "spanbert_base": (384, 3, 2e-5, 1e-4),
        "spanbert_large": (512, 3, 1e-5, 3e-4),
    }
    for name, (length, crop, bert_lr, task_lr) in expected.items():
        model, training = resolved[name]
        assert (model.max_segment_len, model.max_training_sentences) == (length, crop), name
        assert (training.bert_learning_rate, training.task_learning_rate) == (bert_lr, task_lr), name
        assert (model.ffnn_size, model.coref_depth, training.num_epochs) == (3000, 2, 20), name
        # the original's antecedents, every one scored by the fine FFNN, whatever the host
        assert (model.max_top_antecedents, model.min_coarse_score) == (50, None), name
    assert resolved["spanbert_large"][0].tokenizer_name == "bert-base-cased"
    minilm = resolved["cpu_minilm"][0]
    assert minilm.encoder == "embedded:minilm"
    assert (minilm.ffnn_size, minilm.max_top_antecedents, minilm.min_coarse_score) == ("auto", "auto", 0.0)


def test_pipeline_wiring():
    pipeline = create_pipeline()
    assert pipeline.all_outputs() == {"baseline_model", "baseline_dev_predictions", "baseline_dev_metrics"}
    assert pipeline.inputs() == {
        "segmented_documents",
        "segmentation",
        "params:coref_train",
        "params:evaluate.remove_singletons",
        "raw_dev",
    }


def test_a_new_configuration_in_the_same_work_dir_starts_afresh_with_its_curves(encoder_dir, tmp_path, caplog):
    train(segmented(), segmentation(str(encoder_dir)), params_for(encoder_dir, tmp_path / "work"), dev_gold(), False)
    with caplog.at_level("WARNING"):
        model = train(
            segmented(),
            segmentation(str(encoder_dir)),
            params_for(encoder_dir, tmp_path / "work", ffnn_size=12),
            dev_gold(),
            False,
        )
    assert "starting a fresh run" in caplog.text
    assert model.config.ffnn_size == 12
    assert (tmp_path / "work" / "dvclive" / "metrics.json").is_file()
