"""Model directories: weights in safetensors, configuration in JSON, the tokenizer beside them.

A model directory is self-contained: it loads with no network and no pickle. It is written whole
(to a temporary folder beside it, then renamed), and holds nothing that depends on the installed
library versions or on where the encoder was loaded from, so two runs with the same weights write the
same bytes (what DVC hashes).

    model.safetensors    every weight (encoder and task)
    coref_config.json    {"model_type": ..., "model": {...}, "format_version": 2}
    encoder/config.json  the HF configuration of the encoder (its architecture)
    tokenizer/           the tokenizer, as ``save_pretrained`` writes it
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn
from torch.overrides import TorchFunctionMode

from coref_pipeline.files import atomic_directory, atomic_path, atomic_write_json
from coref_pipeline.models.directory import (
    CONFIG,
    TOKENIZER,
    ModelDirectoryError,
    read_model_type,
    read_stored_config,
    write_training_record,
)

__all__ = [
    "CONFIG",
    "FORMAT_VERSION",
    "WEIGHTS",
    "DeferredTokenizer",
    "ModelDirectoryError",
    "PROVENANCE_KEYS",
    "atomic_save_tensors",
    "build_with_weights",
    "load_model_directory",
    "read_model_type",
    "save_model_directory",
]


FORMAT_VERSION = 2  # 2: span and pair scorers under span_scorer./pair_scorer. (1 is upgraded on load)
WEIGHTS = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"  # the ``tokenizers`` file ``save_pretrained`` writes of a fast tokenizer
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"  # and its settings, the special tokens among them


OS_ERROR_IN_MESSAGE = re.compile(r"\(os error (\d+)\)")


def atomic_save_tensors(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str] | None = None) -> None:
    """A safetensors file, written atomically; the operating system's refusal (a full disk, ...) as an
    ``OutputError`` naming ``path``, as every other write says it."""
    with atomic_path(path) as temporary:
        try:
            save_file(
                {name: tensor.detach().contiguous().clone() for name, tensor in tensors.items()}, temporary, metadata
            )
        except SafetensorError as error:  # its Rust writer reports the refusal in its message: "... (os error 28)"
            found = OS_ERROR_IN_MESSAGE.search(str(error))
            if found is None:
                raise
            code = int(found.group(1))
            raise OSError(code, os.strerror(code), str(path)) from error


# Keys HF writes into a saved configuration that say how it was made, not what it is: the library's
# version and the arguments it was loaded with. Left out, so that a model directory's bytes do not
# depend on the installed transformers or on the encoder's source.
PROVENANCE_KEYS = ("transformers_version", "is_local", "local_files_only", "_commit_hash", "_name_or_path")


def _drop_provenance(path: Path) -> None:
    """Rewrite the JSON file ``path`` without :data:`PROVENANCE_KEYS` (sorted keys, as HF writes them)."""
    values = json.loads(path.read_text(encoding="utf-8"))
    for key in PROVENANCE_KEYS:
        values.pop(key, None)
    path.write_text(json.dumps(values, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def save_model_directory(
    directory: str | Path,
    model: torch.nn.Module,
    model_type: str,
    model_config: dict[str, Any],
    tokenizer: Any,
    training: dict[str, Any] | None = None,
) -> None:
    """Write a self-contained model directory, whole or not at all; ``training``: its training record."""
    with atomic_directory(directory) as folder:
        model.encoder.model.config.save_pretrained(folder / "encoder")
        _drop_provenance(folder / "encoder" / "config.json")
        tokenizer.save_pretrained(folder / TOKENIZER)
        _drop_provenance(folder / TOKENIZER / "tokenizer_config.json")
        atomic_write_json(
            {"model_type": model_type, "model": model_config, "format_version": FORMAT_VERSION}, folder / CONFIG
        )
        atomic_save_tensors(model.state_dict(), folder / WEIGHTS, {"model_type": model_type})
        if training is not None:
            write_training_record(training, folder)


# The tensor methods torch.nn.init's initialisers end in (the modules' own reset_parameters and HF's _init_weights)
_TENSOR_INITIALISERS = frozenset(
    getattr(torch.Tensor, name)
    for name in ("normal_", "uniform_", "fill_", "zero_", "bernoulli_", "exponential_", "geometric_", "random_")
)


class _SkipMetaInitialisation(TorchFunctionMode):
    """Initialisers hand a meta tensor back as it is: it has no values to draw. Drawing them anyway costs a
    prediction's load the import of ``torch._dynamo`` (torch computes ``normal_`` on the meta device in Python
    behind a dynamo guard: 1.1 s of a ``predict`` command on a 2-core CPU by ``PYTHONPROFILEIMPORTTIME``), for
    nothing: the weights are copied in afterwards. Every other operation runs as it does (the shapes are the same)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _TENSOR_INITIALISERS or getattr(func, "__module__", None) == "torch.nn.init":
            tensor = args[0] if args else kwargs.get("tensor")  # torch.nn.init passes it by name
            if isinstance(tensor, torch.Tensor) and tensor.is_meta:
                return tensor
        return func(*args, **kwargs)


def build_with_weights(build: Callable[[], nn.Module], state_dict: dict[str, torch.Tensor]) -> nn.Module:
    """The module ``build()`` makes, holding ``state_dict``'s weights (every one: strict), built without the
    random initialisation that the weights then replace.

    It is built on the meta device (no memory, no initialisation: ``_SkipMetaInitialisation`` skips the
    initialisers), given uninitialised memory on the CPU, its buffers that no state dict holds (HF's position and
    token type ids) filled by the initialisation of the HF model that owns them (``_init_weights``, which
    transformers 5 uses for the same purpose), then the weights copied in. A module with such a buffer outside
    an HF model is built as ``build()`` builds it. The same module, parameter for parameter and buffer for
    buffer, as ``build()`` followed by ``load_state_dict``; on the packaged MiniLM's baseline a load of 3.5-5.3 s
    in ``predict`` against 5.5-6.8 s for one that initialised them (docs/benchmarks.md, "Throughput of
    ``predict`` on a CPU": the load column; measured on different days).
    """
    with torch.device("meta"), _SkipMetaInitialisation():
        model = build()
    persistent = set(model.state_dict())
    owners = {name.rpartition(".")[0] for name, _ in model.named_buffers() if name not in persistent}
    initialisers = {
        prefix: module
        for prefix, module in model.named_modules()
        if callable(getattr(module, "_init_weights", None)) and hasattr(module, "config")
    }
    filled: list[tuple[nn.Module, nn.Module]] = []
    for owner in sorted(owners):
        root = max(
            (prefix for prefix in initialisers if owner == prefix or owner.startswith(f"{prefix}.") or prefix == ""),
            key=len,
            default=None,
        )
        if root is None:
            model = build()
            model.load_state_dict(state_dict)
            return model
        filled.append((initialisers[root], model.get_submodule(owner)))
    # What ``model.to_empty(device="cpu")`` does, through torch.empty: its torch.empty_like of a meta tensor runs
    # torch's Python reference, which imports sympy (0.4 s of a ``predict`` command, ``PYTHONPROFILEIMPORTTIME``).
    model._apply(lambda tensor: torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu"))
    with torch.no_grad():
        for initialiser, module in filled:
            initialiser._init_weights(module)
    model.load_state_dict(state_dict)
    return model


class DeferredTokenizer:
    """A model directory's tokenizer for prediction: what predicting needs (the subtokens of raw text's words,
    their ids, the special tokens, the vocabulary and its fingerprint) from the ``tokenizers`` file and the
    special tokens of ``tokenizer_config.json`` alone, and transformers' tokenizer (``AutoTokenizer``, the same
    files) loaded at the first other use: saving. ``predict`` then imports no transformers (0.7 s of its start on
    jsonlines, 1.0 s of a raw text's first prediction, docs/benchmarks.md).

    The file is what ``save_pretrained`` wrote of transformers' tokenizer, so its backend is the one
    transformers loads from it (``tests/models/test_serialization.py`` holds the two equal).
    """

    def __init__(self, folder: Path) -> None:
        from tokenizers import Tokenizer

        self._folder = folder
        path = folder / TOKENIZER_FILE
        try:
            self.backend_tokenizer = Tokenizer.from_file(str(path))
        except Exception as error:  # tokenizers raises a bare Exception for a malformed file
            raise ModelDirectoryError(f"{path}: not a tokenizer file ({error})") from None
        self._special_tokens = _special_tokens(folder / TOKENIZER_CONFIG_FILE)
        self._word_encoder: Any = None
        self._loaded: Any = None

    @property
    def cls_token(self) -> str:
        return self._special_token("cls_token")

    @property
    def sep_token(self) -> str:
        return self._special_token("sep_token")

    @property
    def unk_token(self) -> str:
        return self._special_token("unk_token")

    def _special_token(self, name: str) -> str:
        token = self._special_tokens.get(name)
        return getattr(self.loaded, name) if token is None else token

    def encode_words(self, batches: list[list[str]]) -> list[Any]:
        """The ``tokenizers`` encodings of batches of words, no special tokens added: what transformers' fast
        tokenizer gives for ``tokenizer(batches, is_split_into_words=True, add_special_tokens=False)``, whose
        per-call settings (no truncation, no padding, special tokens kept whole) a copy of the backend holds
        here; the file's own truncation and padding (``save_pretrained`` keeps a hub tokenizer's) stay."""
        if self._word_encoder is None:
            from tokenizers import Tokenizer

            encoder = Tokenizer.from_str(self.backend_tokenizer.to_str())
            encoder.no_truncation()
            encoder.no_padding()
            encoder.encode_special_tokens = False
            self._word_encoder = encoder
        return self._word_encoder.encode_batch(batches, add_special_tokens=False, is_pretokenized=True)

    @property
    def loaded(self) -> Any:
        """transformers' tokenizer of the same folder (loaded at the first call)."""
        if self._loaded is None:
            from transformers import AutoTokenizer

            self._loaded = AutoTokenizer.from_pretrained(self._folder)
        return self._loaded

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> int | list[int]:
        """As transformers' fast tokenizer converts them: a token outside the vocabulary is the unknown token."""
        if isinstance(tokens, str):
            return self.convert_tokens_to_ids([tokens])[0]
        ids = [self.backend_tokenizer.token_to_id(token) for token in tokens]
        if None in ids:
            unknown = self.backend_tokenizer.token_to_id(self.unk_token)
            ids = [unknown if index is None else index for index in ids]
        return ids

    def get_vocab(self) -> dict[str, int]:
        """Every token's id, the added tokens' too (as transformers' fast tokenizer gives them)."""
        return self.backend_tokenizer.get_vocab(with_added_tokens=True)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.loaded, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.loaded(*args, **kwargs)

    def __len__(self) -> int:
        return len(self.loaded)


def _special_tokens(path: Path) -> dict[str, str]:
    """The special tokens a ``tokenizer_config.json`` names (a string, or an added token's ``content``); an
    absent file, key or unreadable value leaves transformers' tokenizer to say."""
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    tokens = {}
    for name in ("cls_token", "sep_token", "unk_token"):
        value = stored.get(name) if isinstance(stored, dict) else None
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            tokens[name] = value
    return tokens


def load_model_directory(
    directory: str | Path, for_prediction: bool = False
) -> tuple[str, dict[str, Any], Any, dict[str, torch.Tensor], Any]:
    """``(model_type, model_config, encoder_config, state_dict, tokenizer)`` of a model directory.

    ``for_prediction``: a BERT configuration that :class:`~coref_pipeline.models.bert.InferenceBert` computes
    as a :class:`~coref_pipeline.models.bert.StoredBertConfig` and the tokenizer a :class:`DeferredTokenizer`,
    so that a jsonlines ``predict`` does not import transformers; otherwise (and for any other encoder)
    transformers' own."""
    directory = Path(directory)
    stored = read_stored_config(directory)
    model_type = stored["model_type"]
    version = stored.get("format_version")
    if version not in (1, FORMAT_VERSION):
        raise ModelDirectoryError(
            f"{directory}: unsupported model directory format {version!r} (this version reads 1 and 2)"
        )
    encoder_config = tokenizer = None
    if for_prediction:
        from coref_pipeline.models.bert import StoredBertConfig

        encoder_config = StoredBertConfig.read(directory / "encoder" / "config.json")
        if (directory / TOKENIZER / TOKENIZER_FILE).is_file():
            tokenizer = DeferredTokenizer(directory / TOKENIZER)
    if encoder_config is None:
        from transformers import AutoConfig

        encoder_config = AutoConfig.from_pretrained(directory / "encoder")
    if tokenizer is None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(directory / TOKENIZER)
    state_dict = load_file(directory / WEIGHTS)
    if version == 1:
        from coref_pipeline.models.scorers import upgrade_version_1_names

        state_dict = upgrade_version_1_names(state_dict)
    return model_type, stored["model"], encoder_config, state_dict, tokenizer
