"""The input files of ``coref-pipeline predict`` (serving.inputs): checked whole, then read a document at a time."""

from __future__ import annotations

import json

import pytest

from coref_pipeline.serving.inputs import InputFormatError, read_predict_inputs


def test_jsonlines_are_checked_whole_and_read_again_as_they_are_predicted(tmp_path):
    source = tmp_path / "docs.jsonl"
    source.write_text(
        '{"text": "Ada wrote."}\n\n{"text": "She smiled.", "doc_key": "two"}\n{"sentences": [["He", "left", "."]]}\n',
        encoding="utf-8",
    )
    inputs = read_predict_inputs(source)
    assert (inputs.kind, inputs.count) == ("raw", 3)
    assert [record["doc_key"] for record in inputs.records()] == ["docs/1", "two", "docs/4"]  # lines, blanks counted
    assert [record["doc_key"] for record in inputs.records(2)] == ["docs/4"]  # from the third on
    source.write_text('{"text": "Another file."}\n', encoding="utf-8")
    assert [record["text"] for record in inputs.records()] == ["Another file."]  # read again: none held


def test_a_fault_anywhere_is_found_before_any_document_is_given(tmp_path):
    source = tmp_path / "docs.jsonl"
    lines = [json.dumps({"text": f"Document {n}."}) for n in range(50)] + ['{"text": 7}']
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InputFormatError, match=r"docs\.jsonl:51: 'text' must be a string"):
        read_predict_inputs(source)


def test_joshi_documents_without_their_words_are_named(tmp_path):
    source = tmp_path / "docs.jsonlines"
    document = {"sentences": [["[CLS]", "a", "[SEP]"]], "speakers": [["-", "-", "-"]]}
    document |= {"sentence_map": [0, 0, 0], "subtoken_map": [0, 0, 0], "clusters": []}
    records = [{**document, "doc_key": f"d{n}"} for n in range(5)] + [{**document, "doc_key": "w", "tokens": ["a"]}]
    source.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    inputs = read_predict_inputs(source)
    assert (inputs.kind, inputs.count, inputs.without_tokens) == ("jsonlines", 6, ["d0", "d1", "d2"])


def test_a_folders_text_files_are_read_as_they_are_predicted(tmp_path):
    for name, text in (("b", "Second."), ("a", "First.")):
        (tmp_path / f"{name}.txt").write_text(text, encoding="utf-8")
    inputs = read_predict_inputs(tmp_path)
    assert inputs.count == 2
    (tmp_path / "a.txt").write_text("First, edited.", encoding="utf-8")
    assert [(record["doc_key"], record["text"]) for record in inputs.records()] == [
        ("a", "First, edited."),
        ("b", "Second."),
    ]
    (tmp_path / "b.txt").write_bytes(b"\xff\xfe not UTF-8")
    with pytest.raises(UnicodeDecodeError):
        read_predict_inputs(tmp_path)
