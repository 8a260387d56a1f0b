"""``coref-pipeline import-icoref``: what it writes and says, and one line for each checkpoint it refuses."""

from __future__ import annotations

import json

import torch
import yaml

from coref_pipeline.original.icoref import read_checkpoint
from coref_pipeline.serving.coref_model import CorefModel
from tests.cli.test_commands import one_error_line, run
from tests.original.test_icoref import CHECKPOINT, ENCODER, experiments_file


def test_imports_the_fixtures_checkpoint_and_says_what_it_skipped(tmp_path, capsys):
    out = tmp_path / "icoref"
    arguments = ["import-icoref", str(CHECKPOINT), str(out), "--encoder", str(ENCODER)]
    assert run([*arguments, "--experiments", experiments_file(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert f"Wrote {out} (with its model card, README.md): imported 63 tensors" in printed
    assert "of experiment 'spb_on_512'" in printed and "skipped encoder_optimizer, optimizer" in printed
    model = CorefModel.load(out)
    assert model.model_type == "incremental" and model.config.evict_from == "start"
    card = (out / "README.md").read_text()
    assert yaml.safe_load(card.split("---\n")[1])["library_name"] == "coref-pipeline"
    assert "Xia, Sedoc and Van Durme" in card and "`coref-pipeline import-icoref`" in card


def test_a_pickled_checkpoint_is_one_line_and_nothing_is_written(tmp_path, capsys):
    path = tmp_path / "checkpoint.bin"
    torch.save(
        {
            "model": read_checkpoint(CHECKPOINT)["model"],
            "optimizer": torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1),
        },
        path,
    )
    out = tmp_path / "out"
    assert run(["import-icoref", str(path), str(out), "--encoder", str(ENCODER)]) == 2
    one_error_line(capsys.readouterr().err, path, "pickled Python objects", "torch.optim.sgd.SGD")
    assert not out.exists()


def test_an_unknown_experiment_is_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    assert run(["import-icoref", str(CHECKPOINT), str(out), "--encoder", str(ENCODER), "--experiment", "spb_on_7"]) == 2
    one_error_line(capsys.readouterr().err, "spb_on_7", "spb_on_512")
    assert not out.exists()


def test_predict_reads_text_with_an_imported_model(tmp_path, capsys):
    """The imported directory serves raw text: predict segments it with its own tokenizer and writes clusters
    (in the README's venv: no TensorFlow, no code of the authors)."""
    out = tmp_path / "icoref"
    arguments = ["import-icoref", str(CHECKPOINT), str(out), "--encoder", str(ENCODER)]
    assert run([*arguments, "--experiments", experiments_file(tmp_path)]) == 0
    text = tmp_path / "story.txt"
    text.write_text("Ada met Charles. He gave her his engine. She read the book in the train.\n")
    predicted = tmp_path / "predicted.jsonl"
    assert run(["predict", "--model", str(out), str(text), str(predicted)]) == 0
    record = json.loads(predicted.read_text())
    assert record["sentences"][0] == ["Ada", "met", "Charles", "."]
    assert isinstance(record["clusters"], list) and all(len(cluster) >= 2 for cluster in record["clusters"])
    assert record["clusters"], "the fixture model links something in this text"
