"""Nodes of the ``ontonotes`` pipeline: OntoNotes 5.0 -> the corpus's CoNLL-2012 files."""

from __future__ import annotations

from typing import Any

from coref_pipeline.formats.conll import ConllFile
from coref_pipeline.formats.ontonotes import SPLITS, OntonotesSettings, build_corpus


def ontonotes(params: dict[str, Any]) -> tuple[ConllFile, ...]:
    """The train, dev and test files from the source the parameters name (the release, or the Hub's Parquet)."""
    corpus = build_corpus(OntonotesSettings.from_dict(params))
    return tuple(corpus.conll_file(split) for split in SPLITS)
