"""The pretrain pipeline's node, and coref_train fine-tuning the encoder it writes (encoder_from)."""

from __future__ import annotations

import json

import pytest
from kedro.framework.project import configure_project

from coref_pipeline.models.config import ConfigError, CorefTrainParameters
from coref_pipeline.pipeline_registry import register_pipelines
from coref_pipeline.pipelines.coref_train.nodes import train
from coref_pipeline.pipelines.pretrain.nodes import pretrain
from tests.pipelines.test_coref_train import dev_gold, encoder_dir, params_for, segmentation, segmented  # noqa: F401


def pretrain_params(encoder, tmp_path, **overrides):
    preset = {
        "encoder": str(encoder),
        "max_segment_len": 16,
        "batch_segments": 2,
        "held_out_share": 0.3,
        "max_span_words": 3,
        "bert_learning_rate": 1e-3,
        "num_epochs": 1,
        "eval_frequency": 2,
        "checkpoint_frequency": 2,
        "report_frequency": 1,
        "device": "cpu",
    }
    return {
        "preset": "tiny",
        "presets": {"tiny": preset},
        "overrides": overrides,
        "work_dir": str(tmp_path / "pretrain_training"),
        "out_dir": str(tmp_path / "pretrained_encoder"),
        "restart": False,
    }


def test_coref_train_fine_tunes_the_encoder_pretrain_wrote(encoder_dir, tmp_path):  # noqa: F811
    card_params = {"corpus": "data/01_raw/sample", "language": ["en"], "license": None}
    metrics = pretrain(segmented(), segmentation(str(encoder_dir)), pretrain_params(encoder_dir, tmp_path), card_params)
    assert {"loss", "mlm_loss", "sbo_loss", "accuracy", "best_step", "steps"} <= set(metrics)
    out = tmp_path / "pretrained_encoder"
    assert "# sample-pretrained-encoder" in (out / "README.md").read_text()  # its card names the corpus's folder
    params = {**params_for(encoder_dir, tmp_path / "work", num_epochs=1), "encoder_from": str(out)}
    model = train(segmented(), segmentation(str(encoder_dir)), params, dev_gold(), False)
    saved = json.loads((tmp_path / "work" / "best" / "coref_config.json").read_text())
    assert saved["model"]["encoder"] == str(out)  # trained from the pretrained encoder,
    assert model.config.tokenizer_name == str(encoder_dir)  # read with the tokenizer segment used


def test_encoder_from_and_a_trained_start_are_refused_together():
    with pytest.raises(ConfigError, match="encoder_from"):
        CorefTrainParameters.from_dict({"encoder_from": "a", "init_from": "b"})


def test_a_plain_kedro_run_leaves_pretraining_out():
    configure_project("coref_pipeline")
    pipelines = register_pipelines()
    assert "pretrain_encoder" in {node.name for node in pipelines["pretrain"].nodes}
    assert "pretrain_encoder" not in {node.name for node in pipelines["__default__"].nodes}
