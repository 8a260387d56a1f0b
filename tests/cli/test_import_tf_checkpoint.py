"""``coref-pipeline import-tf-checkpoint``: what it writes and says, and one line for each checkpoint it refuses."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import yaml

from coref_pipeline.serving.coref_model import CorefModel
from tests.cli.test_commands import one_error_line, run
from tests.original.test_tf_import import checkpoint_arrays, rewritten
from tests.released import BERT_ONLY_CHECKPOINT, TINY_CHECKPOINT


def test_imports_a_checkpoint_and_says_what_it_skipped(tmp_path, capsys):
    out = tmp_path / "released"
    assert run(["import-tf-checkpoint", str(TINY_CHECKPOINT), str(out)]) == 0
    printed = capsys.readouterr().out
    assert (
        f"Wrote {out} (with its model card, README.md): imported 66 variables (5,906 parameters) of experiment "
        in printed
    )
    assert (
        "skipped 135 optimiser variables (46.2 KiB: Adam, Adam_1, adam_m, adam_v, beta1_power, beta2_power, " in printed
    )
    assert f"--tokenizer {out}/tokenizer --seg-len 16" in printed
    model = CorefModel.load(out)
    assert model.model_type == "baseline" and model.config.ffnn_size == 9
    # Its card: the Hub's format, no scores (not scored here yet), where the model comes from.
    card = (out / "README.md").read_text()
    header = yaml.safe_load(card.split("---\n")[1])
    assert header["library_name"] == "coref-pipeline" and "model-index" not in header
    assert card.count("# tiny_coref\n") == 1 and "experiment `tiny_coref` of its experiments.conf" in card
    assert "Not scored by this project yet" in card


def test_the_experiment_is_named_with_preset(tmp_path, capsys):
    directory = tmp_path / "download"
    shutil.copytree(TINY_CHECKPOINT, directory)
    conf = directory / "experiments.conf"
    conf.write_text(conf.read_text() + "\nother = ${best}{\n  ffnn_size = 3\n}\n")
    assert run(["import-tf-checkpoint", str(directory), str(tmp_path / "a")]) == 2
    one_error_line(capsys.readouterr().err, "experiments.conf", "--preset")
    assert run(["import-tf-checkpoint", str(directory), str(tmp_path / "b"), "--preset", "tiny_coref"]) == 0


def unknown_variable(tmp_path):
    arrays = checkpoint_arrays()
    arrays["coref_layer/unexpected"] = np.zeros(3, np.float32)
    return rewritten(tmp_path, arrays)


def contradicting_shape(tmp_path):
    directory = tmp_path / "tiny_coref"
    shutil.copytree(TINY_CHECKPOINT, directory)
    conf = directory / "experiments.conf"
    conf.write_text(conf.read_text().replace("feature_size = 5", "feature_size = 6"))
    return directory


def empty_directory(tmp_path):
    (tmp_path / "nothing").mkdir()
    return tmp_path / "nothing"


@pytest.mark.parametrize(
    ("make", "names"),
    [
        (empty_directory, ["nothing", "no TensorFlow checkpoint in this directory"]),
        (lambda _: BERT_ONLY_CHECKPOINT, ["bert_model.ckpt", "a BERT checkpoint without the coreference model's"]),
        (unknown_variable, ["'coref_layer/unexpected'", "is neither a variable of experiment 'tiny_coref'"]),
        (contradicting_shape, ["'span_width_embeddings' has shape [4, 5]", "gives it [4, 6]"]),
    ],
)
def test_a_checkpoint_it_cannot_import_is_one_line_and_nothing_is_written(tmp_path, capsys, make, names):
    checkpoint = make(tmp_path)
    out = tmp_path / "out"
    assert run(["import-tf-checkpoint", str(checkpoint), str(out)]) == 2
    one_error_line(capsys.readouterr().err, *names)
    assert not out.exists() and not (tmp_path / ".out.tmp").exists()


def test_from_a_checkpoint_to_test_set_conll_f1_on_the_command_line(tmp_path, capsys):
    """The README's commands: import, minimize with the model's tokenizer, predict a response, score it."""
    from tests.released import released_conll

    gold = tmp_path / "test.english.v4_gold_conll"
    gold.write_text(released_conll("test").text)
    model, jsonlines = tmp_path / "tiny_coref", tmp_path / "test.english.16.jsonlines"
    response = tmp_path / "test.response.v4_gold_conll"
    assert run(["import-tf-checkpoint", str(TINY_CHECKPOINT), str(model)]) == 0
    assert run(["minimize", str(gold), str(jsonlines), "--tokenizer", f"{model}/tokenizer", "--seg-len", "16"]) == 0
    predict = ["predict", "--model", str(model), str(jsonlines), str(tmp_path / "out.jsonlines")]
    assert run([*predict, "--gold-conll", str(gold), "--conll", str(response), "--device", "cpu"]) == 0
    capsys.readouterr()
    assert run(["score", str(gold), str(response)]) == 0
    [conll_line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("CoNLL")]
    assert 0 <= float(conll_line.split()[-1]) <= 100
