"""A model directory's configuration file, read without torch: which model it holds and what it reads.

``serialization.py`` writes and loads the whole directory (weights, encoder configuration,
tokenizer); this module only reads ``coref_config.json``, so that what needs no model (the
``segment`` pipeline, segmenting for a model taken as it is) does not import one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from coref_pipeline.errors import UserError
from coref_pipeline.files import atomic_write_json
from coref_pipeline.formats.segmentation import SegmentLength

CONFIG = "coref_config.json"
TOKENIZER = "tokenizer"  # the folder of the model's tokenizer
# How the model was trained (written by training's ``fit``; absent for a model not trained here): model cards read it.
TRAINING = "training.json"
# The record's figures that the clock decides (the training's wall time), in a file of their own beside it: the rest
# of the directory is the same bytes for the same inputs, so DVC, which ignores this file (.dvcignore), sees a
# re-run's model as the same model and the stages after it stay up to date.
TRAINING_TIME = "training_time.json"
TRAIN_MINUTES = "train_minutes"  # the training's wall time, in minutes: the one figure of TRAINING_TIME
TIME_KEYS = (TRAIN_MINUTES,)


# A Hugging Face Hub model id: "owner/name".
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


class ModelDirectoryError(UserError, FileNotFoundError):
    """A path that does not hold a model directory this version reads."""


def resolve_model_directory(source: str | Path, revision: str | None = None) -> Path:
    """The local folder of a model: ``source`` itself when it is a path that exists (or not a Hub id), else the
    Hub model ``owner/name`` at ``revision`` (a branch, tag or commit; None: ``main``) through ``huggingface_hub``:
    downloaded into its cache (``HF_HOME``, ``HF_HUB_CACHE``) once, read from there after; with
    ``HF_HUB_OFFLINE=1`` from the cache only. What cannot be had is one line naming the id and what to do."""
    path = Path(source)
    if path.exists() or not HUB_ID.fullmatch(str(source)):
        if revision is not None:
            raise ModelDirectoryError(f"{source}: a revision ({revision}) is for a Hub model id, not a local directory")
        return path
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    where = f"{source}" + (f" at revision {revision}" if revision else "")
    try:
        return Path(snapshot_download(repo_id=str(source), revision=revision))
    except RevisionNotFoundError:
        raise ModelDirectoryError(f"{where}: the Hub model has no such revision") from None
    except RepositoryNotFoundError:
        raise ModelDirectoryError(
            f"{source}: neither a local directory nor a Hub model (a private one needs `hf auth login`)"
        ) from None
    except LocalEntryNotFoundError:
        raise ModelDirectoryError(
            f"{where}: not a local directory, and not in the Hugging Face cache with the network off or out of "
            "reach: run once with a network (or unset HF_HUB_OFFLINE), or give the model's directory"
        ) from None


def read_stored_config(directory: str | Path) -> dict[str, Any]:
    """``{"model_type": ..., "model": {...}, "format_version": ...}`` of a model directory."""
    path = Path(directory) / CONFIG
    if not path.is_file():
        raise ModelDirectoryError(
            f"{directory} is not a coref-pipeline model directory ({CONFIG} is missing): train one with "
            f"`kedro run --pipelines=coref_train` (data/06_models/baseline) or `--pipelines=incremental_train`"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def training_time(train_seconds: float) -> dict[str, float]:
    """The clock's figures of a training run of ``train_seconds``, as ``training_time.json`` holds them."""
    return {TRAIN_MINUTES: round(train_seconds / 60, 2)}


def read_training_record(directory: str | Path) -> dict[str, Any] | None:
    """The directory's training record (``training.json``: preset, steps, ..., with the wall time of
    ``training_time.json`` where it is there), or None without one."""
    path, time = Path(directory) / TRAINING, Path(directory) / TRAINING_TIME
    if not path.is_file():
        return None
    record = json.loads(path.read_text(encoding="utf-8"))
    return {**record, **json.loads(time.read_text(encoding="utf-8"))} if time.is_file() else record


def write_training_record(record: dict[str, Any], directory: str | Path) -> None:
    """``record`` into ``training.json``, its clock's figures (``TIME_KEYS``) into ``training_time.json``."""
    directory = Path(directory)
    atomic_write_json({key: value for key, value in record.items() if key not in TIME_KEYS}, directory / TRAINING)
    clock = {key: record[key] for key in TIME_KEYS if key in record}
    if clock:
        atomic_write_json(clock, directory / TRAINING_TIME)


def read_model_type(directory: str | Path) -> str:
    """``"baseline"`` or ``"incremental"``, from the directory's ``coref_config.json``."""
    return read_stored_config(directory)["model_type"]


def segments_read_by(directory: str | Path) -> tuple[str, int | str]:
    """The tokenizer (the directory's own folder) and the segment length (a ``SegmentLength`` label) that the
    model in ``directory`` reads: what ``segment`` writes for a model taken as it is (``coref_train.take_from``)."""
    model = read_stored_config(directory)["model"]
    length = SegmentLength(model["max_segment_len"], model.get("segment_sentences")).label
    return str(Path(directory) / TOKENIZER), length
