"""The preprocess pipeline: one node per split over preprocess_corpus."""

from __future__ import annotations

import pytest

from coref_pipeline.config_base import ConfigError
from coref_pipeline.formats.conll import ConllFile
from coref_pipeline.pipelines.preprocess.nodes import preprocess
from coref_pipeline.pipelines.preprocess.pipeline import create_pipeline
from tests.paths import FIXTURES

PARAMS = {"min_columns": 12, "skip_bad_documents": False, "genres": ["bc", "nw"], "default_genre": "nw"}


def test_the_node_reads_its_parameters():
    frame = preprocess(ConllFile.read(FIXTURES / "tiny.v4_gold_conll"), PARAMS)
    assert frame["doc_key"].tolist() == ["bc/tiny/00/tiny_0000_0"] and frame["genre"].tolist() == ["bc"]
    with pytest.raises(ConfigError, match=r"unknown preprocess key\(s\) \['skip_bad_document'\]"):
        preprocess(ConllFile.read(FIXTURES / "tiny.v4_gold_conll"), {"skip_bad_document": True})


def test_pipeline_has_a_node_per_split():
    pipeline = create_pipeline()
    assert sorted(pipeline.outputs()) == ["word_documents_dev", "word_documents_test", "word_documents_train"]
    assert sorted(pipeline.inputs()) == ["params:preprocess", "raw_dev", "raw_test", "raw_train"]
