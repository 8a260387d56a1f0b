"""Corpora: preprocess_corpus, segment_corpus and the segmentation record a SegmentedCorpus checks."""

from __future__ import annotations

import pytest

from coref_pipeline.config_base import ConfigError
from coref_pipeline.formats.conll import ConllFile, ConllFormatError
from coref_pipeline.formats.corpus import (
    WORD_DOCUMENT_COLUMNS,
    PreprocessSettings,
    SegmentedCorpus,
    SegmentSettings,
    preprocess_corpus,
    segment_corpus,
    segment_for_model,
)
from coref_pipeline.formats.segmentation import SegmentationMismatchError, check_document, tokenizer_fingerprint
from tests.models.tiny import tiny_hf_tokenizer
from tests.paths import FIXTURES

TINY = FIXTURES / "tiny.v4_gold_conll"
SETTINGS = PreprocessSettings(genres=("bc", "nw"))


def test_preprocess_gives_one_row_per_document():
    frame = preprocess_corpus(ConllFile.read(TINY), SETTINGS)
    assert list(frame.columns) == WORD_DOCUMENT_COLUMNS
    [row] = frame.to_dict("records")
    assert row["doc_key"] == "bc/tiny/00/tiny_0000_0" and row["part"] == 0 and row["genre"] == "bc"
    assert row["words"][:2] == ["Anna", "Kowalczyk"]
    assert row["clusters"] == [[[0, 1], [3, 3]], [[3, 4], [6, 6]]]


def test_errors_name_the_file_and_skipping_is_a_setting():
    good = TINY.read_text()
    bad = good.replace("bc/tiny/00/tiny_0000", "nw/bad").replace("\t2)\n", "\t-\n")
    conll_file = ConllFile("corpus.conll", bad + good)
    with pytest.raises(ConllFormatError, match=r"^corpus\.conll:5: unbalanced"):
        preprocess_corpus(conll_file, SETTINGS)
    frame = preprocess_corpus(conll_file, PreprocessSettings(skip_bad_documents=True))
    assert frame["doc_key"].tolist() == ["bc/tiny/00/tiny_0000_0"]


def test_settings_reject_unknown_keys_and_wrong_types():
    with pytest.raises(ConfigError, match=r"unknown preprocess key\(s\) \['min_colums'\]"):
        PreprocessSettings.from_dict({"min_colums": 12})
    with pytest.raises(ConfigError, match=r"preprocess key 'min_columns': 'twelve' is not an integer"):
        PreprocessSettings.from_dict({"min_columns": "twelve"})
    with pytest.raises(
        ConfigError, match=r"segment key 'max_segment_lens': 'abc' is not a list of integers or strings or null"
    ):
        SegmentSettings.from_dict({"max_segment_lens": "abc"})


def test_segment_corpus_writes_every_split_and_length_with_its_record():
    frame = preprocess_corpus(ConllFile.read(TINY), SETTINGS)
    partitions, record = segment_corpus({"train": frame, "dev": frame.iloc[:0]}, "embedded:minilm", [8, 128])
    assert sorted(partitions) == [f"{split}.english.{n}" for split in ("dev", "train") for n in (128, 8)]
    assert partitions["dev.english.8"] == []
    [short], [long] = partitions["train.english.8"], partitions["train.english.128"]
    assert len(short["sentences"]) == 3 and len(long["sentences"]) == 1
    check_document(short, 8)
    check_document(long, 128)
    assert long["tokens"] == short["tokens"]
    assert (record.tokenizer, record.max_segment_lens, record.language) == ("embedded:minilm", (8, 128), "english")
    assert len(record.fingerprint) == 64


def test_segmenting_for_a_model_follows_its_tokenizer_and_length_unless_told(tmp_path):
    tiny_hf_tokenizer().save_pretrained(tmp_path / "tiny")
    frame = preprocess_corpus(ConllFile.read(TINY), SETTINGS)
    partitions, record = segment_for_model({"train": frame}, SegmentSettings(), str(tmp_path / "tiny"), 16)
    assert list(partitions) == ["train.english.16"] and record.tokenizer == str(tmp_path / "tiny")
    assert record.fingerprint == tokenizer_fingerprint(tiny_hf_tokenizer())
    told = SegmentSettings(tokenizer="embedded:minilm", max_segment_lens=(32, 64), language="xx")
    partitions, record = segment_for_model({"train": frame}, told, str(tmp_path / "tiny"), 16)
    assert sorted(partitions) == ["train.xx.32", "train.xx.64"] and record.tokenizer == "embedded:minilm"


def test_a_corpus_segmented_with_another_tokenizer_is_refused(minilm_tokenizer):
    frame = preprocess_corpus(ConllFile.read(TINY), SETTINGS)
    partitions, record = segment_corpus({"train": frame}, "embedded:minilm", [16])
    corpus = SegmentedCorpus(partitions, record.to_dict())
    corpus.check_tokenizer("embedded:minilm", minilm_tokenizer, 16, "the model")  # the same: accepted
    with pytest.raises(SegmentationMismatchError) as error:
        corpus.check_tokenizer("my/tiny-bert", tiny_hf_tokenizer(), 16, "the model")
    message = str(error.value)
    assert "segmented with tokenizer 'embedded:minilm', the model uses 'my/tiny-bert'" in message
    assert "kedro run --pipelines=segment --params segment.tokenizer=my/tiny-bert" in message
    with pytest.raises(SegmentationMismatchError, match=r"segmented at max_segment_len \[16\], the model reads 384"):
        corpus.check_tokenizer("embedded:minilm", minilm_tokenizer, 384, "the model")
    with pytest.raises(SegmentationMismatchError, match=r"no segmented documents 'dev.english.16'"):
        corpus.documents("dev", 16)
    assert corpus.documents("train", 16) == partitions["train.english.16"]


def test_a_file_without_documents_is_an_error_naming_it():
    for text in ("", "\n\n", "#begin document (x); part 000\n#end document\n"):
        with pytest.raises(ConllFormatError, match=r"^empty\.conll"):
            preprocess_corpus(ConllFile("empty.conll", text))
