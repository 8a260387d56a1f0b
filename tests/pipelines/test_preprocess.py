"""Nodes of the preprocess pipeline."""

from __future__ import annotations

import pytest

from coref_pipeline.conll import ConllFormatError
from coref_pipeline.datasets import ConllFile, ConllFileDataset
from coref_pipeline.pipelines.preprocess.nodes import WORD_DOCUMENT_COLUMNS, preprocess_conll
from coref_pipeline.pipelines.preprocess.pipeline import create_pipeline

from ..paths import FIXTURES

PARAMS = {"min_columns": 12, "skip_bad_documents": False, "genres": ["bc", "nw"], "default_genre": "nw"}


def test_preprocess_conll_gives_one_row_per_document():
    conll_file = ConllFileDataset(str(FIXTURES / "tiny.v4_gold_conll")).load()
    frame = preprocess_conll(conll_file, PARAMS)
    assert list(frame.columns) == WORD_DOCUMENT_COLUMNS
    [row] = frame.to_dict("records")
    assert row["doc_key"] == "bc/tiny/00/tiny_0000_0" and row["part"] == 0 and row["genre"] == "bc"
    assert row["words"][:2] == ["Anna", "Kowalczyk"]
    assert row["clusters"] == [[[0, 1], [3, 3]], [[3, 4], [6, 6]]]


def test_errors_name_the_file_and_skipping_is_a_parameter():
    good = (FIXTURES / "tiny.v4_gold_conll").read_text()
    bad = good.replace("bc/tiny/00/tiny_0000", "nw/bad").replace("\t2)\n", "\t-\n")
    conll_file = ConllFile("corpus.conll", bad + good)
    with pytest.raises(ConllFormatError, match=r"^corpus\.conll:5: unbalanced"):
        preprocess_conll(conll_file, PARAMS)
    frame = preprocess_conll(conll_file, {**PARAMS, "skip_bad_documents": True})
    assert frame["doc_key"].tolist() == ["bc/tiny/00/tiny_0000_0"]


def test_pipeline_has_a_node_per_split():
    pipeline = create_pipeline()
    assert sorted(pipeline.outputs()) == ["word_documents_dev", "word_documents_test", "word_documents_train"]
    assert sorted(pipeline.inputs()) == ["params:preprocess", "raw_dev", "raw_test", "raw_train"]
