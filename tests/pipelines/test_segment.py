"""The segment pipeline: segments what the chosen coref_train preset reads, and records how."""

from __future__ import annotations

from coref_pipeline.formats.conll import ConllFile
from coref_pipeline.formats.corpus import preprocess_corpus
from coref_pipeline.formats.segmentation import SegmentationRecord
from coref_pipeline.pipelines.segment.nodes import segment
from coref_pipeline.pipelines.segment.pipeline import create_pipeline
from tests.paths import FIXTURES

CHOSEN = {
    "preset": "small",
    "overrides": {},
    "presets": {"base": {"max_segment_len": 128}, "small": {"extends": "base"}},
}
DEFAULTS = {"tokenizer": None, "max_segment_lens": None, "language": "english", "include_tokens": True}


def test_by_default_the_chosen_presets_length_and_tokenizer():
    frame = preprocess_corpus(ConllFile.read(FIXTURES / "tiny.v4_gold_conll"))
    partitions, record = segment(frame, frame.iloc[:0], frame, DEFAULTS, CHOSEN)
    assert sorted(partitions) == ["dev.english.128", "test.english.128", "train.english.128"]
    record = SegmentationRecord.from_dict(record)
    assert record.tokenizer == "embedded:minilm" and record.max_segment_lens == (128,)
    chosen = {**CHOSEN, "overrides": {"max_segment_len": 64}}
    partitions, _ = segment(frame, frame, frame, {**DEFAULTS, "max_segment_lens": [8, 32]}, chosen)
    assert sorted(partitions) == [f"{split}.english.{n}" for split in ("dev", "test", "train") for n in (32, 8)]
    partitions, _ = segment(frame, frame, frame, DEFAULTS, chosen)
    assert sorted(partitions) == [f"{split}.english.64" for split in ("dev", "test", "train")]


def test_pipeline_wiring():
    pipeline = create_pipeline()
    assert pipeline.outputs() == {"segmented_documents", "segmentation"}
    assert {"params:segment", "params:coref_train"} <= pipeline.inputs()
