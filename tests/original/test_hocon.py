"""Import of the original experiments.conf entries."""

from __future__ import annotations

import pytest

from coref_pipeline.cli import main
from coref_pipeline.original.hocon import import_experiment

# The layout of the released experiments.conf: `best` holds the defaults, entries inherit
# with ${best}{...}, and file paths refer to ${data_dir} from outside `best`.
CONF = """
best {
  data_dir = /sdb/data
  max_top_antecedents = 50
  max_training_sentences = 5
  ffnn_size = 1000
  coref_depth = 2
  bert_learning_rate = 1e-5
  task_learning_rate = 2e-4
  genres = ["bc", "bn", "mz", "nw", "pt", "tc", "wb"]
  model_type = independent
  single_example = true
}
spanbert_base = ${best}{
  task_learning_rate = 0.0001
  max_segment_len = 384
  ffnn_size = 3000
  max_training_sentences = 3
  train_path = ${data_dir}/train.english.384.jsonlines
}
mystery = ${best}{
  ffnn_size = 10
}
"""


@pytest.fixture
def conf(tmp_path):
    path = tmp_path / "experiments.conf"
    path.write_text(CONF)
    return path


def test_inheritance_is_resolved_and_paths_left_out(conf):
    preset, left_out = import_experiment(conf, "spanbert_base")
    assert preset["task_learning_rate"] == 0.0001 and preset["bert_learning_rate"] == 1e-5
    assert preset["ffnn_size"] == 3000 and preset["max_top_antecedents"] == 50
    assert preset["encoder"] == "SpanBERT/spanbert-base-cased" and preset["tokenizer"] == "bert-base-cased"
    assert preset["genres"] == ["bc", "bn", "mz", "nw", "pt", "tc", "wb"]
    assert {"data_dir", "train_path", "model_type", "single_example"} <= set(left_out)


def test_cli_prints_a_preset_and_says_what_is_missing(conf, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["import-hocon", str(conf), "mystery"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "No encoder could be inferred" in out and "mystery:\n" in out and "ffnn_size: 10" in out
    with pytest.raises(SystemExit) as exited:
        main(["import-hocon", str(conf), "nope"])
    assert exited.value.code == 2
    assert "no experiment 'nope'; it has ['best', 'mystery', 'spanbert_base']" in capsys.readouterr().err
