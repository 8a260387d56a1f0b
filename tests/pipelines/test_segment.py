"""Nodes of the segment pipeline."""

from __future__ import annotations

from coref_pipeline.datasets import ConllFileDataset
from coref_pipeline.pipelines.preprocess.nodes import preprocess_conll
from coref_pipeline.pipelines.segment.nodes import segment_documents
from coref_pipeline.pipelines.segment.pipeline import create_pipeline
from coref_pipeline.segmentation import check_document

from ..paths import FIXTURES

PREPROCESS = {"min_columns": 12, "skip_bad_documents": False, "genres": ["bc"], "default_genre": "nw"}


def test_segment_documents_writes_every_split_and_length():
    frame = preprocess_conll(ConllFileDataset(str(FIXTURES / "tiny.v4_gold_conll")).load(), PREPROCESS)
    params = {
        "tokenizer": "embedded:minilm",
        "max_segment_lens": [8, 128],
        "language": "english",
        "include_tokens": True,
    }
    outputs = segment_documents(frame, frame.iloc[:0], frame, params)
    assert sorted(outputs) == [f"{split}.english.{n}" for split in ("dev", "test", "train") for n in (128, 8)]
    assert outputs["dev.english.8"] == []
    [short] = outputs["train.english.8"]
    [long] = outputs["train.english.128"]
    assert len(short["sentences"]) == 3 and len(long["sentences"]) == 1
    check_document(short, 8)
    check_document(long, 128)
    assert long["tokens"] == short["tokens"]


def test_pipeline_wiring():
    pipeline = create_pipeline()
    assert pipeline.outputs() == {"segmented_documents"}
    assert "params:segment" in pipeline.inputs()
