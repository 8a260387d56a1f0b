"""Model directories: the same weights give the same bytes, and a directory is written whole or not at all."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
import transformers.configuration_utils

from coref_pipeline.errors import OutputError
from coref_pipeline.inference import CorefModel
from coref_pipeline.models import serialization
from coref_pipeline.models.baseline import BaselineCorefModel

from .tiny import tiny_config, tiny_encoder, tiny_hf_tokenizer


def tiny_model() -> CorefModel:
    return CorefModel("baseline", BaselineCorefModel(tiny_config(), tiny_encoder(seed=3)), tiny_hf_tokenizer())


def contents(directory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(directory)): path.read_bytes() for path in sorted(directory.rglob("*")) if path.is_file()
    }


def test_the_bytes_do_not_depend_on_the_installed_transformers(tmp_path, monkeypatch):
    model = tiny_model()
    model.save(tmp_path / "now")
    monkeypatch.setattr(transformers.configuration_utils, "__version__", "99.0.0")
    model.save(tmp_path / "later")
    assert contents(tmp_path / "now") == contents(tmp_path / "later")
    for name in ("encoder/config.json", "tokenizer/tokenizer_config.json"):
        saved = json.loads((tmp_path / "now" / name).read_text())
        assert not set(saved) & set(serialization.PROVENANCE_KEYS), name
    assert CorefModel.load(tmp_path / "later").config == model.config


def test_a_save_that_fails_leaves_the_earlier_directory_whole(tmp_path, monkeypatch):
    directory = tmp_path / "model"
    tiny_model().save(directory)
    before = contents(directory)

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(serialization, "atomic_save_tensors", full_disk)
    with pytest.raises(OutputError, match="cannot write .*model: no space left on the device"):
        CorefModel("baseline", BaselineCorefModel(tiny_config(), tiny_encoder(seed=9)), tiny_hf_tokenizer()).save(
            directory
        )
    assert contents(directory) == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model"]  # no temporary folder left
