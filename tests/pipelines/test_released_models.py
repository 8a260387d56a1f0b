"""An imported checkpoint of the original, used as the README's "Use the released models" says: segmented for,
taken as the baseline (coref_train.take_from), scored by evaluate, predicting on raw text, fine-tuned
(coref_train.init_from) and the incremental model's start (incremental_train)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from coref_pipeline.cli import main
from coref_pipeline.formats.corpus import SegmentedCorpus, preprocess_corpus
from coref_pipeline.formats.segmentation import SegmentationMismatchError, SegmentationRecord
from coref_pipeline.formats.text import split_text
from coref_pipeline.models.config import SHARED_ARCHITECTURE_KEYS, ConfigError
from coref_pipeline.pipelines.coref_train.nodes import train as coref_train
from coref_pipeline.pipelines.dev_scores import predict_dev, score_dev
from coref_pipeline.pipelines.evaluate.nodes import evaluate, predict_test
from coref_pipeline.pipelines.incremental_train.nodes import train as incremental_train
from coref_pipeline.pipelines.segment.nodes import segment
from coref_pipeline.serving.coref_model import CorefModel
from tests.cli.test_commands import run
from tests.paths import copy_project
from tests.released import TINY_CHECKPOINT, released_conll, write_corpus

SEGMENT = {"tokenizer": None, "max_segment_lens": None, "language": "english", "include_tokens": True}
EVALUATE = {"metrics": ["muc", "bcub", "ceafe", "lea"], "remove_singletons": False}


def coref_train_params(work_dir, **values) -> dict:
    """coref_train's parameters: the committed default preset, and ``values`` (take_from, init_from...)."""
    return {"preset": "cpu_minilm", "presets": {"cpu_minilm": {"encoder": "embedded:minilm"}}, "overrides": {},
            "work_dir": str(work_dir), "restart": False, **values}  # fmt: skip


def segmented_for(imported) -> tuple[dict, dict]:
    """The three splits segmented by the segment node for the model coref_train takes (its tokenizer, its length)."""
    frames = {split: preprocess_corpus(released_conll(split)) for split in ("train", "dev", "test")}
    partitions, record = segment(
        frames["train"], frames["dev"], frames["test"], SEGMENT, coref_train_params("unused", take_from=str(imported))
    )
    return {name: (lambda documents=documents: documents) for name, documents in partitions.items()}, record


def test_segment_writes_what_the_taken_model_reads(imported_tiny_coref):
    segmented, record = segmented_for(imported_tiny_coref)
    assert sorted(segmented) == [f"{split}.english.16" for split in ("dev", "test", "train")]
    record = SegmentationRecord.from_dict(record)
    assert record.tokenizer == str(imported_tiny_coref / "tokenizer") and record.max_segment_lens == (16,)
    model = CorefModel.load(imported_tiny_coref)
    record.check(model.config.tokenizer_name, model.tokenizer, 16, "the model", "unused")
    [document, _] = segmented["dev.english.16"]()
    assert document["sentences"][0][:4] == ["[CLS]", "John", "met", "Mary"]  # cased, in the checkpoint's vocabulary


def test_the_taken_baseline_is_scored_by_evaluate(imported_tiny_coref, tmp_path):
    segmented, record = segmented_for(imported_tiny_coref)
    params = coref_train_params(tmp_path / "work", take_from=str(imported_tiny_coref))
    taken = coref_train(segmented, record, params, released_conll("dev"), False)
    imported = CorefModel.load(imported_tiny_coref)
    assert taken.model_type == "baseline" and taken.config == imported.config
    assert all(torch.equal(taken.model.state_dict()[k], v) for k, v in imported.model.state_dict().items())
    live = tmp_path / "work" / "dvclive" / "params.yaml"
    assert f"take_from: {imported_tiny_coref}" in live.read_text()  # the run records where the baseline came from
    assert not (tmp_path / "work" / "checkpoints").exists()  # nothing trained
    dev_predictions = predict_dev(taken, segmented, record)
    dev_metrics = score_dev(dev_predictions, released_conll("dev"), False)
    test_predictions = predict_test(taken, segmented, record)
    assert test_predictions == imported.predict_corpus(SegmentedCorpus(segmented, record), "test")
    for split, predictions in (("dev", dev_predictions), ("test", test_predictions)):
        response, metrics, scores, documents, breakdown, figure = evaluate(predictions, released_conll(split), EVALUATE)
        assert set(metrics) == {"conll_f1", "muc_f1", "bcub_f1", "ceafe_f1", "lea_f1"}
        assert all(0 <= value <= 100 for value in metrics.values()) and len(documents) == 2
        assert response.startswith("#begin document (bn/tiny/")
        if split == "dev":
            assert {key: metrics[key] for key in dev_metrics} == dev_metrics  # as the training pipeline scored dev


def test_taking_a_model_refuses_what_it_cannot_read(imported_tiny_coref, tmp_path, minilm_tokenizer):
    segmented, record = segmented_for(imported_tiny_coref)
    both = coref_train_params(tmp_path, take_from=str(imported_tiny_coref), init_from=str(imported_tiny_coref))
    with pytest.raises(ConfigError, match="init_from fine-tunes a model and take_from takes one as it is"):
        coref_train(segmented, record, both, released_conll("dev"), False)
    minilm = SegmentationRecord.of("embedded:minilm", minilm_tokenizer, [16]).to_dict()
    with pytest.raises(SegmentationMismatchError, match=r"segmented with tokenizer 'embedded:minilm'"):
        coref_train(segmented, minilm, coref_train_params(tmp_path, take_from=str(imported_tiny_coref)),
                    released_conll("dev"), False)  # fmt: skip
    with pytest.raises(Exception, match=r"is not a coref-pipeline model directory"):
        coref_train(segmented, record, coref_train_params(tmp_path, take_from=str(tmp_path / "none")),
                    released_conll("dev"), False)  # fmt: skip


def test_predict_raw_text(imported_tiny_coref, tmp_path):
    model = CorefModel.load(imported_tiny_coref)
    text = "John met Mary in Paris.  He gave her the book.\n\nShe read it in the train."
    result = model.predict(text, speakers=["Ann", "Bob", "Ann"], genre="bn")
    assert result.sentences and result.words[:3] == ["John", "met", "Mary"]
    assert [[text[s:e] for s, e in cluster] for cluster in result.char_clusters] == result.mention_strings
    document = model.jsonlines_document(split_text(text), ["Ann", "Bob", "Ann"], "bn", "document")
    expected = model.predict_jsonlines(document)["predicted_clusters"]
    assert result.document["predicted_clusters"] == expected
    # the command line reads the same directory
    (tmp_path / "story.txt").write_text(text)
    with pytest.raises(SystemExit) as exited:
        main(["predict", "--model", str(imported_tiny_coref), str(tmp_path / "story.txt"),
              str(tmp_path / "story.jsonl"), "--genre", "bn", "--device", "cpu"])  # fmt: skip
    assert exited.value.code == 0
    written = json.loads((tmp_path / "story.jsonl").read_text())
    assert written["mention_strings"] == model.predict(text, genre="bn").mention_strings


def test_incremental_train_starts_from_the_taken_model(imported_tiny_coref, tmp_path):
    segmented, record = segmented_for(imported_tiny_coref)
    baseline = coref_train(segmented, record,
                           coref_train_params(tmp_path / "baseline", take_from=str(imported_tiny_coref)),
                           released_conll("dev"), False)  # fmt: skip
    params = {
        "work_dir": str(tmp_path / "incremental"),
        "preset": "short",
        "presets": {
            "short": {"dropout_rate": 0.0, "seed": 13, "max_steps": 2, "eval_frequency": 2, "report_frequency": 1,
                      "checkpoint_frequency": 2},
        },
    }  # fmt: skip
    model = incremental_train(baseline, segmented, record, params, released_conll("dev"), False)
    assert model.model_type == "incremental"
    for key in SHARED_ARCHITECTURE_KEYS:
        assert getattr(model.config, key) == getattr(baseline.config, key), key
    encoder = {k: v for k, v in model.model.state_dict().items() if k.startswith("encoder.")}
    assert encoder and all(torch.equal(v, baseline.model.state_dict()[k]) for k, v in encoder.items())  # frozen
    predictions = predict_dev(model, segmented, record)
    assert 0 <= score_dev(predictions, released_conll("dev"), False)["conll_f1"] <= 100


def test_init_from_fine_tunes_the_imported_model(imported_tiny_coref, tmp_path):
    segmented, record = segmented_for(imported_tiny_coref)
    imported = CorefModel.load(imported_tiny_coref)
    preset = {key: value for key, value in imported.config.to_dict().items()}
    preset.update(max_steps=2, eval_frequency=2, report_frequency=1, checkpoint_frequency=2, dropout_rate=0.0)
    params = {"preset": "released", "presets": {"released": preset}, "overrides": {}, "work_dir": str(tmp_path / "run"),
              "restart": False, "init_from": str(imported_tiny_coref)}  # fmt: skip
    tuned = coref_train(segmented, record, params, released_conll("dev"), False)
    assert tuned.config.to_dict() == {**imported.config.to_dict(), "dropout_rate": 0.0}
    before, after = imported.model.state_dict(), tuned.model.state_dict()
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k]) for k in before)  # two steps of training moved the weights


def test_init_from_continues_the_originals_optimiser_state(tmp_path, caplog):
    """``import-tf-checkpoint --optimizer-state``, then coref_train with init_from it and ``optimiser: original``:
    the run starts at the checkpoint's global_step (1), on the original's schedule (num_docs * num_epochs of its
    experiment), at the original's learning rates for that step (its training reference's), and says so."""
    imported = tmp_path / "imported"
    assert run(["import-tf-checkpoint", str(TINY_CHECKPOINT), str(imported), "--optimizer-state"]) == 0
    reference = json.loads((TINY_CHECKPOINT.parent / "tiny_coref_training" / "training.json").read_text())
    segmented, record = segmented_for(imported)
    preset = {**CorefModel.load(imported).config.to_dict(), "optimiser": "original", "dropout_rate": 0.0}
    preset.update(max_steps=3, eval_frequency=2, report_frequency=1, checkpoint_frequency=2)
    params = {"preset": "released", "presets": {"released": preset}, "overrides": {}, "work_dir": str(tmp_path / "run"),
              "restart": False, "init_from": str(imported)}  # fmt: skip
    with caplog.at_level("INFO", logger="coref_pipeline.training.loop"):
        coref_train(segmented, record, params, released_conll("dev"), False)
    expected = reference["resumed"]["step1"]
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Continuing the original's")]
    assert line == (
        "Continuing the original's optimiser state at step 1 of 56040: learning rates "
        f"task_learning_rate {expected['task_learning_rate']:.6g}, "
        f"bert_learning_rate {expected['bert_learning_rate']:.6g}"
    )
    checkpoints = tmp_path / "run" / "checkpoints"
    latest = json.loads((checkpoints / (checkpoints / "LATEST").read_text().strip() / "state.json").read_text())
    assert latest["train_state"]["global_step"] == 3 and latest["train_state"]["planned_steps"] == 56040


@pytest.mark.slow
def test_the_released_model_through_kedro(imported_tiny_coref, tmp_path):
    """The README's commands in a copy of the project: import, segment for it and take it as the baseline,
    evaluate it, start the incremental model from it (catalog, parameters, hooks as a user runs them)."""
    root = copy_project(tmp_path / "project", with_raw_data=False)
    write_corpus(root / "data" / "01_raw" / "released")
    (root / "conf" / "local" / "globals.yml").write_text(
        "corpus:\n  dir: data/01_raw/released\n  train: train.english.v4_gold_conll\n"
        "  dev: dev.english.v4_gold_conll\n  test: test.english.v4_gold_conll\n"
    )
    env = {**os.environ, "COLUMNS": "300"}

    def run(*args: str) -> subprocess.CompletedProcess:
        result = subprocess.run([sys.executable, *args], cwd=root, capture_output=True, text=True, timeout=600, env=env)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return result

    imported = run("-m", "coref_pipeline", "import-tf-checkpoint", str(TINY_CHECKPOINT), "data/06_models/released")
    assert "skipped 135 optimiser variables" in imported.stdout
    take = "coref_train.take_from=data/06_models/released"
    run("-m", "kedro", "run", "--pipelines=preprocess,segment,coref_train", "--params", take)
    run("-m", "kedro", "run", "--pipelines=evaluate", "--tags=baseline")
    reporting = root / "data" / "08_reporting"
    test_metrics = json.loads((reporting / "metrics_baseline_test.json").read_text())
    assert 0 <= test_metrics["conll_f1"] <= 100
    assert json.loads((reporting / "coref_train_dev_metrics.json").read_text()) == json.loads(
        (reporting / "metrics_baseline_dev.json").read_text()
    )
    steps = "incremental_train.overrides.max_steps=2,incremental_train.overrides.eval_frequency=2"
    run("-m", "kedro", "run", "--pipelines=incremental_train", "--params", steps)
    assert (
        json.loads((root / "data" / "06_models" / "incremental" / "coref_config.json").read_text())["model"][
            "max_segment_len"
        ]
        == 16
    )
