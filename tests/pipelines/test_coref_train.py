"""Nodes of the coref_train pipeline, with a tiny encoder stored in a local folder (as a hub id would be)."""

from __future__ import annotations

import pytest

from coref_pipeline.models.config import ConfigError
from coref_pipeline.pipelines.coref_train.nodes import (
    predict_dev,
    resolve_settings,
    score_dev,
    train_baseline,
)
from coref_pipeline.pipelines.coref_train.pipeline import create_pipeline
from coref_pipeline.predict import CorefModel

from ..models.tiny import make_document, tiny_encoder, tiny_hf_tokenizer


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
        "remove_singletons": False,
    }
    return {
        "preset": "tiny",
        "overrides": overrides,
        "language": "english",
        "work_dir": str(work_dir),
        "restart": False,
        "presets": {"tiny": preset},
    }


def segmented():
    docs = {
        split: [make_document(f"nw/{split}{i}_0", seed=i, num_segments=3) for i in range(2)]
        for split in ("train", "dev")
    }
    return {f"{split}.english.16": (lambda d=d: d) for split, d in docs.items()}


def test_train_predict_and_score(encoder_dir, tmp_path):
    params = params_for(encoder_dir, tmp_path / "work")
    model = train_baseline(segmented(), params)
    assert isinstance(model, CorefModel) and model.config.coref_depth == 2
    assert (tmp_path / "work" / "best" / "model.safetensors").is_file()
    assert (tmp_path / "work" / "dvclive" / "metrics.json").is_file()
    predictions = predict_dev(model, segmented(), params)
    assert [p["doc_key"] for p in predictions] == ["nw/dev0_0", "nw/dev1_0"]
    assert all("predicted_clusters" in p for p in predictions)
    metrics = score_dev(predictions, params)
    assert set(metrics) >= {"conll_f1", "muc_f1", "bcub_f1", "ceafe_f1"}
    assert 0 <= metrics["conll_f1"] <= 100


def test_settings_from_a_preset_with_overrides(encoder_dir, tmp_path):
    model, training = resolve_settings(params_for(encoder_dir, tmp_path, ffnn_size=7, seed=5))
    assert (model.ffnn_size, training.seed, model.max_segment_len) == (7, 5, 16)
    with pytest.raises(ConfigError, match=r"unknown coref_train key\(s\) \['ffnn_sise'\]"):
        resolve_settings(params_for(encoder_dir, tmp_path, ffnn_sise=7))
    with pytest.raises(ConfigError, match="unknown preset 'nope'"):
        resolve_settings({**params_for(encoder_dir, tmp_path), "preset": "nope"})


def test_a_missing_partition_is_named():
    from coref_pipeline.datasets import select_partition

    with pytest.raises(KeyError, match="'train.english.512'.*add 512 to segment.max_segment_lens"):
        select_partition(segmented(), "train", "english", 512)


def test_the_committed_presets_resolve():
    import yaml

    from ..paths import PROJECT_ROOT

    params = yaml.safe_load((PROJECT_ROOT / "conf/base/parameters_coref_train.yml").read_text())["coref_train"]
    for name in params["presets"]:
        model, training = resolve_settings({**params, "preset": name})
        assert model.max_segment_len in (128, 384, 512) and training.num_epochs > 0


def test_pipeline_wiring():
    pipeline = create_pipeline()
    assert pipeline.all_outputs() == {"baseline_model", "baseline_dev_predictions", "baseline_dev_metrics"}
    assert pipeline.inputs() == {"segmented_documents", "params:coref_train"}


def test_a_new_configuration_in_the_same_work_dir_starts_afresh_with_its_curves(encoder_dir, tmp_path, caplog):
    train_baseline(segmented(), params_for(encoder_dir, tmp_path / "work"))
    with caplog.at_level("WARNING"):
        model = train_baseline(segmented(), params_for(encoder_dir, tmp_path / "work", ffnn_size=12))
    assert "starting a fresh run" in caplog.text
    assert model.config.ffnn_size == 12
    assert (tmp_path / "work" / "dvclive" / "metrics.json").is_file()
