"""The incremental_train pipeline's nodes, from a tiny baseline trained by the coref_train node."""

from __future__ import annotations

import pytest

from coref_pipeline.inference import CorefModel
from coref_pipeline.models.config import ConfigError
from coref_pipeline.pipelines.coref_train.nodes import train as train_baseline_node
from coref_pipeline.pipelines.dev_scores import predict_dev, score_dev
from coref_pipeline.pipelines.incremental_train.nodes import train
from coref_pipeline.pipelines.incremental_train.pipeline import create_pipeline

from .test_coref_train import dev_gold, encoder_dir, params_for, segmentation, segmented  # noqa: F401 (fixture)


def incremental_params(work_dir, **model):
    return {
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
        },
    }


@pytest.fixture
def baseline(encoder_dir, tmp_path):  # noqa: F811
    params = params_for(encoder_dir, tmp_path / "baseline_run", max_steps=2)
    return train_baseline_node(segmented(), segmentation(str(encoder_dir)), params, dev_gold(), False)


def test_train_predict_and_score(baseline, encoder_dir, tmp_path):  # noqa: F811
    record = segmentation(str(encoder_dir))
    model = train(baseline, segmented(), record, incremental_params(tmp_path / "incremental_run"), dev_gold(), False)
    assert model.model_type == "incremental"
    assert model.config.ffnn_size == baseline.config.ffnn_size and model.config.dropout_rate == 0.4
    assert (tmp_path / "incremental_run" / "best" / "model.safetensors").is_file()
    assert (tmp_path / "incremental_run" / "dvclive").is_dir()
    predictions = predict_dev(model, segmented(), record)
    assert [p["doc_key"] for p in predictions] == ["nw/dev0_0", "nw/dev1_0"]
    metrics = score_dev(predictions, dev_gold(), False)
    assert 0 <= metrics["conll_f1"] <= 100 and set(metrics) >= {"muc_f1", "bcub_f1", "ceafe_f1"}
    reloaded = CorefModel.load(tmp_path / "incremental_run" / "best")
    assert reloaded.model_type == "incremental"


def test_sizes_that_contradict_the_baseline_are_refused(baseline, encoder_dir, tmp_path):  # noqa: F811
    with pytest.raises(ConfigError, match="ffnn_size: baseline 16, configured 32"):
        train(
            baseline,
            segmented(),
            segmentation(str(encoder_dir)),
            incremental_params(tmp_path / "r", ffnn_size=32),
            dev_gold(),
            False,
        )


def test_it_starts_from_a_baseline_only(baseline, encoder_dir, tmp_path):  # noqa: F811
    record = segmentation(str(encoder_dir))
    incremental = train(baseline, segmented(), record, incremental_params(tmp_path / "run"), dev_gold(), False)
    with pytest.raises(ConfigError, match="starts from a baseline model"):
        train(incremental, segmented(), record, incremental_params(tmp_path / "run2"), dev_gold(), False)


def test_pipeline_wiring():
    pipeline = create_pipeline()
    assert pipeline.inputs() == {
        "baseline_model",
        "segmented_documents",
        "segmentation",
        "params:incremental_train",
        "params:evaluate.remove_singletons",
        "raw_dev",
    }
    assert pipeline.outputs() == {"incremental_dev_metrics"}
