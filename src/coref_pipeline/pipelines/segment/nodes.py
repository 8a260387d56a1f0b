"""Nodes of the ``segment`` pipeline: word-level documents -> Joshi-format jsonlines and their record."""

from __future__ import annotations

from typing import Any

import pandas as pd

from coref_pipeline.formats.corpus import SegmentSettings, segment_for_model
from coref_pipeline.models.config import CorefTrainParameters
from coref_pipeline.models.directory import segments_read_by


def segment(
    train: pd.DataFrame, dev: pd.DataFrame, test: pd.DataFrame, params: dict[str, Any], coref_train: dict[str, Any]
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """Every split at the lengths and with the tokenizer the chosen ``coref_train`` preset needs (or the model
    ``coref_train.take_from`` takes, or ``params``')."""
    parameters = CorefTrainParameters.from_dict(coref_train)
    if parameters.take_from:
        tokenizer, length = segments_read_by(parameters.take_from)
    else:
        model, _ = parameters.settings()
        tokenizer, length = model.tokenizer_name, model.segment_length
    frames = {"train": train, "dev": dev, "test": test}
    settings = SegmentSettings.from_dict(params)
    partitions, record = segment_for_model(frames, settings, tokenizer, length)
    return partitions, record.to_dict()
