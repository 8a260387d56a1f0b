"""The coref-pipeline command."""

from __future__ import annotations

import json

import pytest

from coref_pipeline.cli import main
from coref_pipeline.datasets import JsonLinesDataset

from .paths import FIXTURES

TINY = FIXTURES / "tiny.v4_gold_conll"


def run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    return exited.value.code


def test_minimize_writes_jsonlines(tmp_path):
    output = tmp_path / "tiny.jsonlines"
    assert run(["minimize", str(TINY), str(output), "--tokenizer", "embedded:minilm", "--seg-len", "8"]) == 0
    [document] = JsonLinesDataset(str(output)).load()
    assert document["doc_key"] == "bc/tiny/00/tiny_0000_0"
    assert [len(segment) for segment in document["sentences"]] == [8, 5, 6]
    assert document["tokens"][5] == "."


def test_minimize_no_tokens_and_a_tokenizer_folder(tmp_path, minilm_tokenizer):
    minilm_tokenizer.save_pretrained(tmp_path / "tok")
    output = tmp_path / "tiny.jsonlines"
    assert run(["minimize", str(TINY), str(output), "--tokenizer", str(tmp_path / "tok"), "--no-tokens"]) == 0
    line = output.read_text().splitlines()[0]
    assert "tokens" not in json.loads(line)
    assert line.startswith('{"doc_key": "bc/tiny/00/tiny_0000_0", "sentences": [["[CLS]", "anna"')


def test_minimize_bad_input_names_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.conll"
    bad.write_text(TINY.read_text().replace("\t2)\n", "\t-\n"))
    assert run(["minimize", str(bad), str(tmp_path / "out.jsonlines")]) == 2
    assert f"{bad}:5: unbalanced coreference brackets" in capsys.readouterr().err
    assert not (tmp_path / "out.jsonlines").exists()


def test_conll_stats(capsys):
    assert run(["conll-stats", str(TINY)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == [
        "file",
        "documents",
        "sentences",
        "words",
        "mentions",
        "entities",
        "singletons",
        "longest_document_words",
        "longest_document",
    ]
    assert out[1].split()[1:] == ["1", "2", "10", "4", "2", "0", "10", "bc/tiny/00/tiny_0000_0"]


def test_conll_stats_json_and_errors(tmp_path, capsys):
    assert run(["conll-stats", "--json", str(TINY)]) == 0
    stats = json.loads(capsys.readouterr().out)[str(TINY)]
    assert stats["mentions"] == 4 and stats["sentences"] == 2
    assert run(["conll-stats", str(tmp_path / "missing.conll")]) == 2
    assert "missing.conll" in capsys.readouterr().err


def test_predict_writes_clusters_and_a_conll_response(tmp_path):
    from coref_pipeline.conll import read_conll
    from coref_pipeline.models.baseline import BaselineCorefModel
    from coref_pipeline.predict import TrainedModel

    from .models.tiny import tiny_config, tiny_encoder, tiny_hf_tokenizer

    # A tiny model whose vocabulary is the tiny fixture's words, lower-cased by the MiniLM tokenizer.
    documents = tmp_path / "tiny.jsonlines"
    assert run(["minimize", str(TINY), str(documents), "--seg-len", "16"]) == 0
    model = BaselineCorefModel(tiny_config(max_segment_len=16), tiny_encoder())
    TrainedModel("baseline", model, tiny_hf_tokenizer()).save(tmp_path / "model")
    output, response = tmp_path / "out.jsonlines", tmp_path / "response.conll"
    argv = ["predict", "--model", str(tmp_path / "model"), str(documents), str(output)]
    assert run([*argv, "--gold-conll", str(TINY), "--response-conll", str(response)]) == 0
    [predicted] = JsonLinesDataset(str(output)).load()
    assert "predicted_clusters" in predicted and predicted["doc_key"] == "bc/tiny/00/tiny_0000_0"
    [document] = read_conll(response, min_columns=1)
    assert document.doc_key == "bc/tiny/00/tiny_0000_0" and len(document.words) == 10


def test_predict_reports_a_missing_model(tmp_path, capsys):
    assert run(["predict", "--model", str(tmp_path / "none"), str(TINY), str(tmp_path / "o.jsonlines")]) == 2
    assert "not a coref-pipeline model directory" in capsys.readouterr().err
