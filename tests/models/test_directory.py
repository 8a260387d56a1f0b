"""The training record of a model directory: what the clock decides apart from the rest."""

from __future__ import annotations

import json

from coref_pipeline.models.directory import (
    TRAINING,
    TRAINING_TIME,
    read_training_record,
    training_time,
    write_training_record,
)


def test_the_wall_time_goes_to_its_own_file_and_is_read_back_with_the_record(tmp_path):
    record = {"preset": "cpu_minilm", "steps": 600, "best_dev_conll_f1": 53.31, **training_time(312.4)}
    write_training_record(record, tmp_path)
    # training.json is the same bytes whatever the run took; the minutes, rounded to hundredths, are beside it.
    assert json.loads((tmp_path / TRAINING).read_text()) == {
        "preset": "cpu_minilm",
        "steps": 600,
        "best_dev_conll_f1": 53.31,
    }
    assert json.loads((tmp_path / TRAINING_TIME).read_text()) == {"train_minutes": 5.21}
    assert read_training_record(tmp_path) == record


def test_a_record_without_a_time_writes_no_time_file(tmp_path):
    write_training_record({"steps": 3}, tmp_path)
    assert not (tmp_path / TRAINING_TIME).exists()
    assert read_training_record(tmp_path) == {"steps": 3}
    assert read_training_record(tmp_path / "absent") is None
