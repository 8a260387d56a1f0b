"""The incremental_train pipeline's nodes, from a tiny baseline trained by the coref_train node."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import yaml

from coref_pipeline.models.config import ConfigError, IncrementalTrainParameters
from coref_pipeline.pipelines.coref_train.nodes import train as train_baseline_node
from coref_pipeline.pipelines.dev_scores import predict_dev, score_dev
from coref_pipeline.pipelines.incremental_train.nodes import train
from coref_pipeline.pipelines.incremental_train.pipeline import create_pipeline
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.training import incremental_settings
from tests.paths import PROJECT_ROOT
from tests.pipelines.test_coref_train import dev_gold, encoder_dir, params_for, segmentation, segmented  # noqa: F401 (fixture)


def incremental_params(work_dir, **overrides):
    return {
        "work_dir": str(work_dir),
        "restart": False,
        "cache_encoder_outputs": True,
        "preset": "tiny",
        "overrides": overrides,
        "presets": {
            "tiny": {
                "dropout_rate": 0.4,
                "seed": 13,
                "num_epochs": 2,
                "task_learning_rate": 2e-4,
                "gradient_clip": 10.0,
                "patience": 5,
                "eval_frequency": 2,
                "report_frequency": 2,
                "checkpoint_frequency": 2,
            }
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


def test_init_from_continues_an_incremental_model_with_its_own_model_keys(baseline, encoder_dir, tmp_path):  # noqa: F811
    """init_from (e.g. a directory import-icoref wrote): its weights and model keys, the preset's training keys."""
    record = segmentation(str(encoder_dir))
    train(baseline, segmented(), record, incremental_params(tmp_path / "run"), dev_gold(), False)
    start = CorefModel.load(tmp_path / "run" / "best")
    params = incremental_params(tmp_path / "continued", task_learning_rate=0.0)
    params["presets"]["tiny"]["dropout_rate"] = 0.1  # a model key of the preset: not the directory's
    params["init_from"] = str(tmp_path / "run" / "best")
    continued = train(baseline, segmented(), record, params, dev_gold(), False)
    assert continued.config == start.config  # dropout 0.4 kept
    kept = start.model.state_dict()
    assert all(torch.equal(tensor, kept[name]) for name, tensor in continued.model.state_dict().items())
    params["init_from"] = str(tmp_path / "nowhere")
    with pytest.raises(Exception, match="nowhere"):
        train(baseline, segmented(), record, params, dev_gold(), False)


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


# The incremental model's defaults before presets existed (the parameter file's `model` and `training` keys):
# Xia et al.'s setting, but for the calibrated score.
DEFAULTS_BEFORE_PRESETS = {
    "model": {
        "top_span_ratio": 0.4, "threshold": 0.0, "update": "learned", "alpha_hidden_size": 300, "score": "calibrated",
        "pair_features": "paper", "evict_singleton_distance": 600, "evict_distance": 1200, "evict_in_training": True,
        "max_top_entities": None, "recent_mentions": 0, "entity_representation": True, "batch_per_segment": True,
        "min_mention_score": None, "finetune_encoder": False, "loss": "latest_antecedent", "negative_sample_rate": 1.0,
        "teacher_forcing_rate": 0.0, "mention_loss_coef": 0.0, "mention_loss_spans": "candidates",
        "crop_training_documents": False, "dropout_rate": 0.4,
    },
    "training": {
        "seed": 13, "num_epochs": 10, "task_learning_rate": 2.0e-04, "bert_learning_rate": 1.0e-05,
        "gradient_clip": 10.0, "patience": 5, "eval_frequency": 14, "report_frequency": 7, "checkpoint_frequency": 14,
    },
}  # fmt: skip


def committed_parameters(**changes) -> IncrementalTrainParameters:
    values = yaml.safe_load((PROJECT_ROOT / "conf/base/parameters_incremental_train.yml").read_text())
    return IncrementalTrainParameters.from_dict({**values["incremental_train"], **changes})


# What the 2020 code does where this project's reading of the paper differed (docs/models/incremental.md):
# import-icoref's values, which the paper preset takes.
THE_CODES_BEHAVIOURS = {
    "model": {
        "distance_between": "midpoints", "evict_from": "start", "gold_entities": "latest_mention",
        "crossing_spans": True, "read_last_sentence": False, "clip_every_segment": True, "evict_in_training": False,
    },
    "training": {"adam_eps": 1.0e-08},
}  # fmt: skip


def test_the_paper_preset_is_the_earlier_defaults_with_the_papers_score_and_the_codes_behaviours(baseline):
    """preset=paper resolves to the earlier defaults key for key but the score (those defaults used the calibrated
    score, Xia et al. score PAIRSCORE(m, e) + s_m(m)) and the 2020 code's behaviours, as import-icoref sets them."""
    from coref_pipeline.original.icoref import EXPERIMENTS, incremental_values

    config, training = incremental_settings(baseline, committed_parameters(preset="paper").values())
    earlier_config, earlier_training = incremental_settings(
        baseline, {**DEFAULTS_BEFORE_PRESETS["model"], **DEFAULTS_BEFORE_PRESETS["training"]}
    )
    assert training == replace(earlier_training, **THE_CODES_BEHAVIOURS["training"])
    assert config == replace(earlier_config, score="paper", **THE_CODES_BEHAVIOURS["model"])
    assert earlier_config.score == "calibrated"
    state = {  # the sizes import-icoref reads from a checkpoint
        "span_scorer.span_width_embeddings": torch.zeros(30, 20),
        "pair_scorer.segment_distance_emb": torch.zeros(3, 20),
        "genre_embedder.genre_emb": torch.zeros(7, 20),
        "span_scorer.spanFFNN.layers.0.weight": torch.zeros(3000, 1),
    }
    imported = incremental_values(EXPERIMENTS["spb_on_512_dev"], "spb_on_512_dev", state, "SpanBERT")
    for key, value in THE_CODES_BEHAVIOURS["model"].items():
        if key != "evict_in_training":  # import-icoref evicts as the named experiment: spb_on_512_dev evaluates
            assert imported[key] == value, key
    assert (imported["evict_singleton_distance"], imported["evict_distance"]) == (600, 1200)


def test_the_default_preset_is_the_measured_recipe_on_top_of_the_paper(baseline):
    parameters = committed_parameters()
    assert parameters.preset == "recommended"
    config, training = incremental_settings(baseline, parameters.values())
    paper, paper_training = incremental_settings(baseline, committed_parameters(preset="paper").values())
    changed = {key for key in config.keys() if getattr(config, key) != getattr(paper, key)}
    changed |= {key for key in training.keys() if getattr(training, key) != getattr(paper_training, key)}
    assert changed == {
        "score", "pair_features", "recent_mentions", "entity_representation", "max_top_entities", "min_coarse_score",
        "evict_singleton_distance", "evict_distance", "negative_sample_rate", "loss", "mention_loss_coef",
        "mention_loss_spans", "task_learning_rate", "eval_on_start", "precision", "max_steps",
        *THE_CODES_BEHAVIOURS["model"], *THE_CODES_BEHAVIOURS["training"],
    }  # fmt: skip
    assert training.max_steps == 14  # the main job's fixed steps
    assert config.mention_loss_coef == "auto" and training.precision == "auto"
    # an override changes one key and keeps the preset's others
    overridden, _ = incremental_settings(baseline, committed_parameters(overrides={"max_top_entities": 100}).values())
    assert overridden == replace(config, max_top_entities=100)
