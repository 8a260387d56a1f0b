"""Nodes of the incremental_train pipeline, from a tiny baseline trained by the coref_train nodes."""

from __future__ import annotations

import pytest

from coref_pipeline.models.config import ConfigError
from coref_pipeline.pipelines.coref_train.nodes import train_baseline
from coref_pipeline.pipelines.incremental_train.nodes import (
    predict_incremental_dev,
    score_incremental_dev,
    train_incremental,
)
from coref_pipeline.pipelines.incremental_train.pipeline import create_pipeline
from coref_pipeline.predict import CorefModel

from .test_coref_train import encoder_dir, params_for, segmented  # noqa: F401 (fixture)


def incremental_params(work_dir, **model):
    return {
        "language": "english",
        "work_dir": str(work_dir),
        "restart": False,
        "cache_encoder_outputs": True,
        "model": {"dropout_rate": 0.4, **model},
        "training": {
            "seed": 13,
            "num_epochs": 2,
            "task_learning_rate": 2e-4,
            "gradient_clip": 10.0,
            "patience": 5,
            "eval_frequency": 2,
            "report_frequency": 2,
            "checkpoint_frequency": 2,
            "remove_singletons": False,
        },
    }


@pytest.fixture
def baseline(encoder_dir, tmp_path):  # noqa: F811
    return train_baseline(segmented(), params_for(encoder_dir, tmp_path / "baseline_run", max_steps=2))


def test_train_predict_and_score(baseline, tmp_path):
    params = incremental_params(tmp_path / "incremental_run")
    model = train_incremental(baseline, segmented(), params)
    assert model.model_type == "incremental"
    assert model.config.ffnn_size == baseline.config.ffnn_size and model.config.dropout_rate == 0.4
    assert (tmp_path / "incremental_run" / "best" / "model.safetensors").is_file()
    assert (tmp_path / "incremental_run" / "dvclive").is_dir()
    predictions = predict_incremental_dev(model, segmented(), params)
    assert [p["doc_key"] for p in predictions] == ["nw/dev0_0", "nw/dev1_0"]
    metrics = score_incremental_dev(predictions, params)
    assert 0 <= metrics["conll_f1"] <= 100 and set(metrics) >= {"muc_f1", "bcub_f1", "ceafe_f1"}
    reloaded = CorefModel.load(tmp_path / "incremental_run" / "best")
    assert reloaded.model_type == "incremental"


def test_sizes_that_contradict_the_baseline_are_refused(baseline, tmp_path):
    with pytest.raises(ConfigError, match="ffnn_size: baseline 16, configured 32"):
        train_incremental(baseline, segmented(), incremental_params(tmp_path / "run", ffnn_size=32))


def test_it_starts_from_a_baseline_only(baseline, tmp_path):
    incremental = train_incremental(baseline, segmented(), incremental_params(tmp_path / "run"))
    with pytest.raises(ConfigError, match="starts from a baseline model"):
        train_incremental(incremental, segmented(), incremental_params(tmp_path / "run2"))


def test_pipeline_wiring():
    pipeline = create_pipeline()
    assert pipeline.inputs() == {"baseline_model", "segmented_documents", "params:incremental_train"}
    assert pipeline.outputs() == {"incremental_dev_metrics"}
