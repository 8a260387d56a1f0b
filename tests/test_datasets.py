"""The project's Kedro datasets: AtomicDataset saves any one-file dataset whole or not at all."""

from __future__ import annotations

import errno
import json
import re

import pandas as pd
import pytest
from kedro.io import DatasetError

from coref_pipeline.datasets import AtomicDataset
from coref_pipeline.errors import OutputError, error_chain


def test_saves_loads_and_exists_as_the_wrapped_dataset(tmp_path):
    path = tmp_path / "frames" / "train.parquet"
    dataset = AtomicDataset(dataset="pandas.ParquetDataset", filepath=str(path))
    assert not dataset.exists()
    frame = pd.DataFrame({"doc_key": ["a", "b"], "words": [3, 4]})
    dataset.save(frame)
    assert dataset.exists() and dataset.load().equals(frame)
    assert sorted(p.name for p in path.parent.iterdir()) == ["train.parquet"]


def test_configured_wrapped_dataset_keeps_its_arguments(tmp_path):
    path = tmp_path / "breakdown.csv"
    dataset = AtomicDataset(dataset={"type": "pandas.CSVDataset", "save_args": {"index": False}}, filepath=str(path))
    dataset.save(pd.DataFrame({"a": [1, 2]}))
    assert path.read_text() == "a\n1\n2\n"


def test_a_failed_save_leaves_the_earlier_file(tmp_path):
    path = tmp_path / "metrics.json"
    dataset = AtomicDataset(dataset="json.JSONDataset", filepath=str(path))
    dataset.save({"conll_f1": 60.0})
    with pytest.raises(DatasetError):
        dataset.save({"conll_f1": object()})  # not JSON: fails half-way through writing
    assert json.loads(path.read_text()) == {"conll_f1": 60.0}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_a_refused_write_names_the_file(tmp_path, monkeypatch):
    path = tmp_path / "metrics.json"
    dataset = AtomicDataset(dataset="json.JSONDataset", filepath=str(path))
    import builtins

    real_open = builtins.open

    def full_disk(file, mode="r", *args, **kwargs):
        if "w" in str(mode) and str(file).startswith(str(tmp_path)):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", full_disk)
    with pytest.raises(DatasetError) as error:  # Kedro wraps what a dataset raises; the one line is the cause's
        dataset.save({"conll_f1": 60.0})
    [refusal] = [e for e in error_chain(error.value) if isinstance(e, OutputError)]
    assert re.fullmatch(r"cannot write .*/metrics.json: no space left on the device \(the disk is full\)", str(refusal))


def test_a_filepath_inside_the_wrapped_configuration_is_refused(tmp_path):
    with pytest.raises(DatasetError, match="give filepath beside dataset"):
        AtomicDataset(dataset={"type": "json.JSONDataset", "filepath": "x.json"}, filepath=str(tmp_path / "y.json"))
