"""Nodes of the ``preprocess`` pipeline: CoNLL-2012 files -> word-level documents."""

from __future__ import annotations

from typing import Any

import pandas as pd

from coref_pipeline.formats.conll import ConllFile
from coref_pipeline.formats.corpus import PreprocessSettings, preprocess_corpus


def preprocess(conll_file: ConllFile, params: dict[str, Any]) -> pd.DataFrame:
    """One split's CoNLL-2012 file -> word-level documents, one row per document part."""
    return preprocess_corpus(conll_file, PreprocessSettings.from_dict(params))
