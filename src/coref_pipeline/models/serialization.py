"""Model directories: weights in safetensors, configuration in JSON, the tokenizer beside them.

A model directory is self-contained: it loads with no network and no pickle.

    model.safetensors    every weight (encoder and task)
    coref_config.json    {"model_type": ..., "model": {...}, "format_version": 2}
    encoder/config.json  the HF configuration of the encoder (its architecture)
    tokenizer/           the tokenizer, as ``save_pretrained`` writes it
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from coref_pipeline.files import atomic_path, atomic_write_json
from coref_pipeline.models.directory import CONFIG, TOKENIZER, ModelDirectoryError, read_model_type, read_stored_config

__all__ = [
    "CONFIG",
    "FORMAT_VERSION",
    "WEIGHTS",
    "ModelDirectoryError",
    "atomic_save_tensors",
    "load_model_directory",
    "read_model_type",
    "save_model_directory",
]


FORMAT_VERSION = 2  # 2: span and pair scorers under span_scorer./pair_scorer. (1 is upgraded on load)
WEIGHTS = "model.safetensors"


def atomic_save_tensors(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str] | None = None) -> None:
    """A safetensors file, written atomically."""
    with atomic_path(path) as temporary:
        save_file({name: tensor.detach().contiguous().clone() for name, tensor in tensors.items()}, temporary, metadata)


def save_model_directory(
    directory: str | Path, model: torch.nn.Module, model_type: str, model_config: dict[str, Any], tokenizer: Any
) -> None:
    """Write a self-contained model directory (weights last, each file atomically)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.encoder.model.config.save_pretrained(directory / "encoder")
    tokenizer.save_pretrained(directory / TOKENIZER)
    atomic_write_json(
        {"model_type": model_type, "model": model_config, "format_version": FORMAT_VERSION}, directory / CONFIG
    )
    atomic_save_tensors(model.state_dict(), directory / WEIGHTS, {"model_type": model_type})


def load_model_directory(directory: str | Path) -> tuple[str, dict[str, Any], Any, dict[str, torch.Tensor], Any]:
    """``(model_type, model_config, encoder_config, state_dict, tokenizer)`` of a model directory."""
    from transformers import AutoConfig, AutoTokenizer

    directory = Path(directory)
    stored = read_stored_config(directory)
    model_type = stored["model_type"]
    version = stored.get("format_version")
    if version not in (1, FORMAT_VERSION):
        raise ModelDirectoryError(
            f"{directory}: unsupported model directory format {version!r} (this version reads 1 and 2)"
        )
    encoder_config = AutoConfig.from_pretrained(directory / "encoder")
    tokenizer = AutoTokenizer.from_pretrained(directory / TOKENIZER)
    state_dict = load_file(directory / WEIGHTS)
    if version == 1:
        from coref_pipeline.models.scorers import upgrade_version_1_names

        state_dict = upgrade_version_1_names(state_dict)
    return model_type, stored["model"], encoder_config, state_dict, tokenizer
