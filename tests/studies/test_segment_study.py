"""Xia et al.'s segment-length study: segments by sentences, models reading other lengths, the grid and its table."""

from __future__ import annotations

import json
import subprocess

import pandas as pd
import pytest
from click.testing import CliRunner

from coref_pipeline.cli import main
from coref_pipeline.config_base import ConfigError
from coref_pipeline.evaluation.predictions import gold_key, headline_metrics, score_predictions
from coref_pipeline.formats.conll import ConllFile
from coref_pipeline.formats.corpus import SegmentedCorpus, SegmentSettings, partition_name, preprocess_corpus
from coref_pipeline.formats.segmentation import SegmentationRecord, segment_words
from coref_pipeline.models.config import IncrementalConfig
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.studies.segment_study import (
    HEADLINE_METRICS,
    dev_f1_at_segment_lengths,
    grid_commands,
    markdown_table,
    plot_table,
    results_path,
    study_rows,
    study_table,
)
from coref_pipeline.training import Run, incremental_settings, train_incremental
from tests.models.tiny import save_tiny_models, tiny_config, tiny_hf_tokenizer
from tests.paths import FIXTURES, PROJECT_ROOT

LENGTHS = [8, 16, "1sent", "2sent"]


def test_segment_settings_take_sentence_lengths_and_name_their_partitions():
    assert SegmentSettings.from_dict({"max_segment_lens": [128, "384", "5sent"]}).max_segment_lens == (
        128,
        384,
        "5sent",
    )
    with pytest.raises(ConfigError, match=r"segment key 'max_segment_lens': segment length '5 sentences'"):
        SegmentSettings.from_dict({"max_segment_lens": ["5 sentences"]})
    assert partition_name("dev", "english", "5sent") == "dev.english.5sent"


def test_a_model_config_says_which_segments_it_reads():
    baseline = tiny_config(max_segment_len=16)
    assert baseline.segment_length == 16
    shorter = IncrementalConfig.from_baseline(baseline, {"max_segment_len": 8})
    assert shorter.segment_length == 8 and shorter.ffnn_size == baseline.ffnn_size
    by_sentences = IncrementalConfig.from_baseline(baseline, {"max_segment_len": 512, "segment_sentences": 5})
    assert by_sentences.segment_length == "5sent"
    with pytest.raises(ConfigError, match="set max_segment_len: 512"):
        IncrementalConfig.from_baseline(baseline, {"segment_sentences": 5})
    with pytest.raises(ConfigError, match="does not match its baseline's sizes"):  # the weights' shapes still must
        IncrementalConfig.from_baseline(baseline, {"ffnn_size": 7})


@pytest.fixture(scope="module")
def corpus():
    """The tiny gold file (one document, two sentences) as dev and train at every length of ``LENGTHS``."""
    gold = ConllFile.read(FIXTURES / "tiny.v4_gold_conll")
    tokenizer = tiny_hf_tokenizer()
    by_length = segment_words(preprocess_corpus(gold), tokenizer, LENGTHS, include_tokens=True)
    partitions = {
        partition_name(split, "english", label): documents
        for label, documents in by_length.items()
        for split in ("train", "dev")
    }
    return SegmentedCorpus(partitions, SegmentationRecord.of("tiny", tokenizer, LENGTHS)), gold


def test_a_model_reads_segments_of_other_lengths(corpus, tmp_path):
    segmented, gold = corpus
    baseline_dir, incremental_dir = save_tiny_models(tmp_path, max_segment_len=8)
    for directory in (baseline_dir, incremental_dir):
        model = CorefModel.load(directory)
        assert len(model.corpus_documents(segmented, "dev")[0]["sentences"]) == len(
            segmented.documents("dev", 8)[0]["sentences"]
        )
        # Segments of other lengths are read, longer than the model's own 8 too.
        for label, expected_segments in ((16, 1), ("1sent", 2), ("2sent", 1)):
            [document] = model.corpus_documents(segmented, "dev", label)
            assert len(document["sentences"]) == expected_segments
            if expected_segments == 1:  # the whole document (12 subtokens) in one segment
                assert max(len(segment) for segment in document["sentences"]) > 8
            [predicted] = model.predict_corpus(segmented, "dev", label)
            assert predicted["sentences"] == document["sentences"] and "predicted_clusters" in predicted
        with pytest.raises(Exception, match="has a segment of .* subtokens"):
            model.predict_documents(segmented.documents("dev", 16), progress=False)  # not said: refused


def test_dev_f1_at_each_segment_length(corpus, tmp_path):
    segmented, gold = corpus
    baseline_dir, _ = save_tiny_models(tmp_path, max_segment_len=8, threshold=-1.0)
    model = CorefModel.load(baseline_dir)
    results = dev_f1_at_segment_lengths(model, segmented, gold_key(gold), [16, "1sent", 8], False, own_dev_f1=12.5)
    assert results["trained_at"] == "8"
    assert list(results["dev_conll_f1"]) == ["8", "16", "1sent"]
    assert results["dev_conll_f1"]["8"] == 12.5  # evaluate's own figure for the model's own length
    for label in (16, "1sent"):
        predictions = model.predict_corpus(segmented, "dev", label)
        expected = headline_metrics(score_predictions(predictions, False, HEADLINE_METRICS, gold_key(gold)))
        assert results["dev_conll_f1"][str(label)] == expected["conll_f1"]


def test_the_incremental_model_trains_at_its_own_segment_length(corpus, tmp_path):
    segmented, _ = corpus
    baseline_dir, _ = save_tiny_models(tmp_path, max_segment_len=16)
    baseline = CorefModel.load(baseline_dir)
    only_sentences = SegmentedCorpus(
        {name: documents for name, documents in segmented.partitions.items() if name.endswith(".1sent")},
        segmented.record,
    )
    config, training = incremental_settings(
        baseline, {"max_segment_len": 512, "segment_sentences": 1, "num_epochs": 1, "eval_frequency": 1}
    )
    trained = train_incremental(baseline, only_sentences, config, training, Run(tmp_path / "run", False))
    assert trained.config.segment_length == "1sent"
    trained.save(tmp_path / "model")
    loaded = CorefModel.load(tmp_path / "model")
    read = loaded.corpus_documents(only_sentences, "dev")[0]["sentences"]
    assert read == segmented.documents("dev", "1sent")[0]["sentences"]
    # Raw text is segmented as the model was trained: one sentence a segment.
    result = loaded.predict("Anna met her brother . He smiled . They left .")
    assert [len(segment) - 2 for segment in result.document["sentences"]] == [5, 3, 3]


def test_grid_commands_queue_one_experiment_per_training_length():
    commands = grid_commands("incremental", [128, "5sent"], [128, 256, "5sent"], 384, ["params.yaml:x=1"])
    assert [command[:5] for command in commands] == [["dvc", "exp", "run", "--queue", "--name"]] * 2
    assert [command[5] for command in commands] == ["seglen-incremental-128", "seglen-incremental-5sent"]
    first, second = (" ".join(command) for command in commands)
    # Every experiment segments at every length (and the baseline's 384): the shared stages are the same.
    assert "conf/base/parameters_segment.yml:segment.max_segment_lens=[128,5sent,256,384]" in first
    assert "conf/base/parameters_evaluate.yml:evaluate.segment_lengths=[128,256,5sent]" in second
    assert "parameters_incremental_train.yml:++incremental_train.overrides.max_segment_len=128 " in first
    assert "parameters_incremental_train.yml:++incremental_train.overrides.segment_sentences=null" in first
    assert "parameters_incremental_train.yml:++incremental_train.overrides.max_segment_len=512 " in second
    assert "parameters_incremental_train.yml:++incremental_train.overrides.segment_sentences=5" in second
    # Each row is its trained model, not the starting point a short budget failed to beat on dev.
    assert "parameters_incremental_train.yml:++incremental_train.overrides.eval_on_start=false" in first
    assert first.endswith("-S params.yaml:x=1")  # the user's settings come last: they override
    baseline = " ".join(grid_commands("baseline", [256], [256], 384)[0])
    assert "conf/base/parameters_coref_train.yml:++coref_train.overrides.max_segment_len=256" in baseline
    assert "conf/base/parameters_coref_train.yml:++coref_train.overrides.eval_on_start=false" in baseline
    with pytest.raises(ValueError, match="segment length"):
        grid_commands("incremental", ["5 sentences"], [128], 384)


def exp_show(*experiments) -> tuple[list, dict]:
    """``dvc exp show --json`` output (DVC 3: the workspace, then the baseline commit and its
    experiments) and each experiment commit's results file, as ``{rev: text}``."""

    def record(name, timestamp):
        metrics = {"data/08_reporting/metrics_incremental_dev.json": {"data": {"conll_f1": 1.0}}}
        return {"rev": name + "-rev", "name": name, "data": {"timestamp": timestamp, "params": {}, "metrics": metrics}}

    shown = [
        {**record("workspace", ""), "experiments": None},
        {
            **record("main", "2026-11-23T20:00:00"),
            "experiments": [{"revs": [record(name, timestamp)]} for name, timestamp, _ in experiments],
        },
    ]
    files = {name + "-rev": json.dumps(results) for name, _, results in experiments if results is not None}
    return shown, files


def reader(files: dict):
    return lambda rev, path: files.get(rev) if path == results_path("incremental") else None


def test_the_table_gathers_the_experiments_in_the_study_order(tmp_path):
    shown = exp_show(
        ("a", "2026-11-23T21:00:00", {"trained_at": "5sent", "dev_conll_f1": {"5sent": 50.0, "128": 40.0}}),
        ("b", "2026-11-23T21:05:00", {"trained_at": "128", "dev_conll_f1": {"128": 45.0, "5sent": 48.0}}),
        ("c", "2026-11-23T20:30:00", {"trained_at": "128", "dev_conll_f1": {"128": 1.0, "5sent": 2.0}}),  # older
        ("d", "2026-11-23T21:06:00", None),  # another experiment
    )
    # The commit the experiments start from has results of its own (the project's dvc repro), and so
    # has a queued experiment's commit (the workspace's files): neither is a row.
    other = json.dumps({"trained_at": "384", "dev_conll_f1": {"384": 60.0}})
    queued = {"revs": [{"rev": "queued-rev", "name": "e", "data": {"timestamp": "2026-11-23T22:00:00"}}]}
    shown[0][1]["experiments"].append({**queued, "executor": {"state": "queued"}})
    files = {**shown[1], "main-rev": other, "queued-rev": other}
    rows = study_rows(*shown[:1], "incremental", reader(files))
    assert sorted(row["name"] for row in rows) == ["a", "b", "c"]
    table = study_table(rows)
    assert list(table.index) == ["128", "5sent"] and list(table.columns) == ["128", "5sent"]
    assert table.loc["128", "5sent"] == 48.0 and table.loc["5sent", "128"] == 40.0  # the latest run counts
    markdown = markdown_table(table)
    assert markdown.splitlines()[0] == "| trained at \\ read at | 128 | 5sent |"
    assert "| 128 | 45.00 | 48.00 |" in markdown
    plot_table(table, tmp_path / "grid.png", "title")
    assert (tmp_path / "grid.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no experiment"):
        study_table(study_rows(exp_show()[0], "incremental", reader({})))
    partial = study_table([{"timestamp": "", "trained_at": "256", "dev_conll_f1": {"256": 3.0}}, *rows])
    assert pd.isna(partial.loc["256", "128"]) and "| 256 |  | 3.00 |" in markdown_table(partial)


def test_the_commands(tmp_path, monkeypatch):
    monkeypatch.chdir(PROJECT_ROOT)
    runner = CliRunner()
    queued = runner.invoke(main, ["segment-study", "queue", "--dry-run", "-S", "params.yaml:a=1"])
    assert queued.exit_code == 0, queued.output
    lines = queued.output.splitlines()
    assert len(lines) == 7 and all(
        line.startswith("dvc exp run --queue") and line.endswith("params.yaml:a=1") for line in lines
    )
    bad = runner.invoke(main, ["segment-study", "queue", "--dry-run", "--train-lengths", "7sentences"])
    assert bad.exit_code == 2 and "segment length '7sentences'" in bad.output
    # A git repository whose commit holds one experiment's results, as `dvc exp run` commits them.
    repository = tmp_path / "repository"
    results = repository / results_path("incremental")
    results.parent.mkdir(parents=True)
    results.write_text(json.dumps({"trained_at": "128", "dev_conll_f1": {"128": 45.0}}))
    git = ["git", "-C", str(repository), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repository)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "experiment"], check=True)
    rev = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    listing, _ = exp_show(("a", "t", None))
    listing[1]["experiments"][0]["revs"][0]["rev"] = rev
    shown = tmp_path / "exp.json"
    shown.write_text(json.dumps(listing))
    monkeypatch.chdir(repository)
    out, docs = tmp_path / "reporting", tmp_path / "docs"
    made = runner.invoke(
        main, ["segment-study", "table", "--from-json", str(shown), "--out-dir", str(out), "--copy-to", str(docs)]
    )
    assert made.exit_code == 0, made.output
    assert "| 128 | 45.00 |" in made.output
    for folder in (out, docs):
        assert (folder / "segment_lengths_incremental.md").read_text().startswith("| trained at")
        assert (folder / "segment_lengths_incremental.png").stat().st_size > 0
    shown.write_text(json.dumps(exp_show()[0]))
    empty = runner.invoke(main, ["segment-study", "table", "--from-json", str(shown), "--out-dir", str(out)])
    assert empty.exit_code == 2 and "segment-study queue" in empty.output
