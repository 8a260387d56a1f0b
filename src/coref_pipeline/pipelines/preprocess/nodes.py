"""Nodes of the ``preprocess`` pipeline: CoNLL-2012 files -> word-level documents."""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd

from coref_pipeline.conll import ConllDocument, genre_of, parse_conll_lines
from coref_pipeline.datasets import ConllFile

logger = logging.getLogger(__name__)

WORD_DOCUMENT_COLUMNS = ["doc_key", "name", "part", "genre", "words", "sentence_ids", "speakers", "pos", "clusters"]


def documents_to_frame(documents: list[ConllDocument], genres: list[str], default_genre: str) -> pd.DataFrame:
    """One row per document (part) with list columns; clusters as ``[[[start, end], ...], ...]``."""
    rows = [
        {
            "doc_key": document.doc_key,
            "name": document.name,
            "part": document.part if document.part is not None else 0,
            "genre": genre_of(document.doc_key, genres, default_genre),
            "words": document.words,
            "sentence_ids": document.sentence_ids,
            "speakers": document.speakers,
            "pos": document.pos,
            "clusters": [[list(span) for span in cluster] for cluster in document.clusters],
        }
        for document in documents
    ]
    return pd.DataFrame(rows, columns=WORD_DOCUMENT_COLUMNS)


def preprocess_conll(conll_file: ConllFile, params: dict[str, Any]) -> pd.DataFrame:
    """Parse a CoNLL-2012 file into word-level documents (one row per document part)."""
    errors: list = []
    documents = parse_conll_lines(
        conll_file.text.splitlines(),
        conll_file.path,
        min_columns=params["min_columns"],
        skip_bad_documents=params["skip_bad_documents"],
        errors=errors,
    )
    if errors:
        logger.warning("%s: skipped %d bad document(s)", conll_file.path, len(errors))
    logger.info("%s: %d documents, %d words", conll_file.path, len(documents), sum(len(d.words) for d in documents))
    return documents_to_frame(documents, params["genres"], params["default_genre"])
