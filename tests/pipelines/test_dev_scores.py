"""What both training pipelines share: the run a training node builds."""

from __future__ import annotations

from pathlib import Path

from coref_pipeline.formats.conll import ConllFile
from coref_pipeline.models.config import CorefTrainParameters, IncrementalTrainParameters
from coref_pipeline.pipelines.dev_scores import training_run

DEV_GOLD = ConllFile.read(Path(__file__).parents[2] / "data/01_raw/sample/dev.english.v4_gold_conll")


def test_the_progress_bar_says_what_trains_on_what():
    parameters = CorefTrainParameters(preset="cpu_minilm", work_dir="runs/baseline")
    run = training_run(parameters, "baseline", "embedded:minilm", DEV_GOLD, remove_singletons=True)
    assert run.description == "train baseline cpu_minilm on sample"
    assert run.work_dir == Path("runs/baseline")
    assert run.work_dir_parameter == "coref_train.work_dir"
    assert run.remove_singletons is True
    assert run.log_params == {"preset": "cpu_minilm", "overrides": {}}


def test_an_encoder_other_than_the_packaged_minilm_is_named_on_the_progress_bar():
    overrides = {"encoder": "sentence-transformers/all-mpnet-base-v2"}
    parameters = CorefTrainParameters(preset="cpu_minilm", overrides=overrides)
    run = training_run(parameters, "baseline", overrides["encoder"], DEV_GOLD, remove_singletons=True)
    assert run.description == "train baseline cpu_minilm with all-mpnet-base-v2 on sample"
    assert run.log_params == {"preset": "cpu_minilm", "overrides": overrides}

    incremental = IncrementalTrainParameters(preset="recommended", restart=True)
    run = training_run(incremental, "incremental", "data/06_models/pretrained_encoder", DEV_GOLD, False)
    assert run.description == "train incremental recommended with pretrained_encoder on sample"
    assert run.work_dir_parameter == "incremental_train.work_dir"
    assert run.restart is True
