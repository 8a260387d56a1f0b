"""A model directory's configuration file, read without torch: which model it holds and what it reads.

``serialization.py`` writes and loads the whole directory (weights, encoder configuration,
tokenizer); this module only reads ``coref_config.json``, so that what needs no model (the
``segment`` pipeline, segmenting for a model taken as it is) does not import one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from coref_pipeline.errors import UserError
from coref_pipeline.segmentation import SegmentLength

CONFIG = "coref_config.json"
TOKENIZER = "tokenizer"  # the folder of the model's tokenizer


class ModelDirectoryError(UserError, FileNotFoundError):
    """A path that does not hold a model directory this version reads."""


def read_stored_config(directory: str | Path) -> dict[str, Any]:
    """``{"model_type": ..., "model": {...}, "format_version": ...}`` of a model directory."""
    path = Path(directory) / CONFIG
    if not path.is_file():
        raise ModelDirectoryError(
            f"{directory} is not a coref-pipeline model directory ({CONFIG} is missing): train one with "
            f"`kedro run --pipelines=coref_train` (data/06_models/baseline) or `--pipelines=incremental_train`"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def read_model_type(directory: str | Path) -> str:
    """``"baseline"`` or ``"incremental"``, from the directory's ``coref_config.json``."""
    return read_stored_config(directory)["model_type"]


def segments_read_by(directory: str | Path) -> tuple[str, int | str]:
    """The tokenizer (the directory's own folder) and the segment length (a ``SegmentLength`` label) that the
    model in ``directory`` reads: what ``segment`` writes for a model taken as it is (``coref_train.take_from``)."""
    model = read_stored_config(directory)["model"]
    length = SegmentLength(model["max_segment_len"], model.get("segment_sentences")).label
    return str(Path(directory) / TOKENIZER), length
