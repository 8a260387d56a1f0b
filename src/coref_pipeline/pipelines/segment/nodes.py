"""Nodes of the ``segment`` pipeline: word-level documents -> Joshi-format jsonlines and their record."""

from __future__ import annotations

from typing import Any

import pandas as pd

from coref_pipeline.corpus import SegmentSettings, segment_for_model
from coref_pipeline.models.config import CorefTrainParameters


def segment(
    train: pd.DataFrame, dev: pd.DataFrame, test: pd.DataFrame, params: dict[str, Any], coref_train: dict[str, Any]
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """Every split at the lengths and with the tokenizer the chosen ``coref_train`` preset needs (or ``params``')."""
    model, _ = CorefTrainParameters.from_dict(coref_train).settings()
    frames = {"train": train, "dev": dev, "test": test}
    settings = SegmentSettings.from_dict(params)
    partitions, record = segment_for_model(frames, settings, model.tokenizer_name, model.segment_length)
    return partitions, record.to_dict()
