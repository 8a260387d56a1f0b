"""The coref-pipeline command: minimize, conll-stats, predict and the group itself."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import click
import pytest

from coref_pipeline.cli import cli, main
from coref_pipeline.files import read_jsonlines
from coref_pipeline.formats.segmentation import SegmentationRecord, sidecar_path, tokenizer_fingerprint
from tests.paths import FIXTURES

TINY = FIXTURES / "tiny.v4_gold_conll"
BINARY = bytes(range(256)) * 4  # not UTF-8


def run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    return exited.value.code


def one_error_line(err: str, *names: object) -> str:
    """The one line of an error on stderr; it names each of ``names`` and is no traceback."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and "Traceback" not in err, err
    for name in names:
        assert str(name) in lines[0], (name, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def tiny_tokenizer_dir(tmp_path_factory):
    """The tiny models' tokenizer saved to a folder, for ``minimize --tokenizer DIR``."""
    from tests.models.tiny import tiny_hf_tokenizer

    folder = tmp_path_factory.mktemp("tiny_tokenizer")
    tiny_hf_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    from tests.models.tiny import save_tiny_models

    return save_tiny_models(tmp_path_factory.mktemp("cli_models"), threshold=-1e4)


# ------------------------------------------------------------------ the group


def test_the_kedro_group_adds_no_command():
    assert isinstance(cli, click.Group) and not cli.commands


def test_help_lists_every_command(capsys):
    assert run(["--help"]) == 0
    out = capsys.readouterr().out
    for name in (
        "minimize",
        "conll-stats",
        "predict",
        "score",
        "import-hocon",
        "import-tf-checkpoint",
        "import-icoref",
    ):
        assert f"  {name} " in out


def test_an_unknown_command_is_a_usage_error(capsys):
    assert run(["frobnicate"]) == 2
    assert "frobnicate" in capsys.readouterr().err


def command_process(*args: str, code: str | None = None) -> subprocess.CompletedProcess:
    """``python -m coref_pipeline ARGS`` (or ``python -c CODE``) as a process of its own, as a user runs it."""
    argv = [sys.executable, "-c", code] if code is not None else [sys.executable, "-m", "coref_pipeline", *args]
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}  # buffered, as most
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=environment)


def test_the_command_as_a_process_ends_with_its_code_and_all_it_wrote(tmp_path):
    """Run as the process's command, it ends without the interpreter's teardown: the exit code is the command's
    (0; 2 on bad input), its error line and its output file are whole."""
    out = tmp_path / "tiny.jsonlines"
    done = command_process("minimize", "--no-tokens", str(TINY), str(out))
    assert done.returncode == 0, done.stderr
    assert [document["doc_key"] for document in read_jsonlines(out)]  # a whole file of documents
    failed = command_process("minimize", "--no-tokens", str(tmp_path / "missing.conll"), str(tmp_path / "x.jsonl"))
    assert failed.returncode == 2
    one_error_line(failed.stderr, "missing.conll")


def test_end_process_does_what_an_exit_does_first(tmp_path):
    """Threads that are not daemons finish (a thread pool's idle worker told to stop first), exit handlers run,
    buffered output is flushed, and the code is read as sys.exit reads it (None 0, an int, a message on stderr, 1)."""
    marker, handled = tmp_path / "thread.txt", tmp_path / "atexit.txt"

    def ending_with(code: object) -> subprocess.CompletedProcess:
        return command_process(
            code=f"""
import atexit, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
from coref_pipeline.cli import end_process
def late():
    time.sleep(0.3)
    open({str(marker)!r}, "w").write("thread")
threading.Thread(target=late).start()
pool = ThreadPoolExecutor(1)  # an idle worker that is no daemon, as serve's prediction pool leaves one
pool.submit(int).result()
atexit.register(lambda: open({str(handled)!r}, "w").write("handler"))
sys.stdout.write("buffered, no newline")
end_process({code!r})
"""
        )

    done = ending_with(3)
    assert done.returncode == 3
    assert done.stdout == "buffered, no newline"
    assert marker.read_text() == "thread" and handled.read_text() == "handler"
    for code, status, stderr in ((None, 0, ""), ("a message", 1, "a message\n")):
        done = ending_with(code)
        assert (done.returncode, done.stderr) == (status, stderr)


# ------------------------------------------------------------------ minimize


def test_minimize_writes_jsonlines(tmp_path):
    output = tmp_path / "tiny.jsonlines"
    assert run(["minimize", str(TINY), str(output), "--tokenizer", "embedded:minilm", "--seg-len", "8"]) == 0
    [document] = read_jsonlines(output)
    assert document["doc_key"] == "bc/tiny/00/tiny_0000_0"
    assert [len(segment) for segment in document["sentences"]] == [8, 5, 6]
    assert document["tokens"][5] == "."


def test_minimize_writes_the_segmentation_record_beside_its_output(tmp_path, minilm_tokenizer):
    output = tmp_path / "tiny.jsonlines"
    assert run(["minimize", str(TINY), str(output), "--seg-len", "8"]) == 0
    assert sidecar_path(output) == tmp_path / "tiny.segmentation.json"
    record = SegmentationRecord.load(sidecar_path(output))
    assert record.tokenizer == "embedded:minilm" and record.max_segment_lens == (8,)
    assert record.fingerprint == tokenizer_fingerprint(minilm_tokenizer)


def test_minimize_no_tokens_and_a_tokenizer_folder(tmp_path, minilm_tokenizer):
    minilm_tokenizer.save_pretrained(tmp_path / "tok")
    output = tmp_path / "tiny.jsonlines"
    assert run(["minimize", str(TINY), str(output), "--tokenizer", str(tmp_path / "tok"), "--no-tokens"]) == 0
    line = output.read_text().splitlines()[0]
    assert "tokens" not in json.loads(line)
    assert line.startswith('{"doc_key": "bc/tiny/00/tiny_0000_0", "sentences": [["[CLS]", "anna"')
    # The same vocabulary under another name: the record says which, and its fingerprint matches.
    record = SegmentationRecord.load(sidecar_path(output))
    assert record.tokenizer == str(tmp_path / "tok")
    assert record.fingerprint == tokenizer_fingerprint(minilm_tokenizer)


def test_minimize_bad_input_names_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.conll"
    bad.write_text(TINY.read_text().replace("\t2)\n", "\t-\n"))
    assert run(["minimize", str(bad), str(tmp_path / "out.jsonlines")]) == 2
    assert f"{bad}:5: unbalanced coreference brackets" in capsys.readouterr().err
    # conll-stats and score read it differently (the scorer allows mentions across sentences), and say the same.
    message = (
        f"{bad}:5: unbalanced coreference brackets: '(2' opened here is never closed (no '2)' before '#end document')"
    )
    assert run(["conll-stats", str(bad)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {message}"
    assert run(["score", str(TINY), str(bad)]) == 2
    assert capsys.readouterr().err.strip() == f"score: error: {message}"
    assert not (tmp_path / "out.jsonlines").exists()


def test_minimize_without_documents_leaves_the_output_as_it_was(tmp_path, capsys):
    output, sidecar = tmp_path / "out.jsonlines", tmp_path / "out.segmentation.json"
    output.write_bytes(b'{"doc_key": "earlier"}\n')
    sidecar.write_bytes(b"{}\n")
    for content in ("", "\n\n", "# only a comment\n"):
        empty = tmp_path / "empty.conll"
        empty.write_text(content, encoding="utf-8")
        assert run(["minimize", str(empty), str(output)]) == 2
        assert one_error_line(capsys.readouterr().err).startswith(f"error: {empty}: no documents")
        assert output.read_bytes() == b'{"doc_key": "earlier"}\n' and sidecar.read_bytes() == b"{}\n"


def test_minimize_and_conll_stats_on_a_binary_file(tmp_path, capsys):
    binary = tmp_path / "image.conll"
    binary.write_bytes(BINARY)
    assert run(["minimize", str(binary), str(tmp_path / "out.jsonlines")]) == 2
    assert "not a UTF-8 text file" in one_error_line(capsys.readouterr().err, binary)
    assert not (tmp_path / "out.jsonlines").exists()
    assert run(["conll-stats", str(TINY), str(binary)]) == 2
    assert "not a UTF-8 text file" in one_error_line(capsys.readouterr().err, binary)


# ------------------------------------------------------------------ conll-stats


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


def test_conll_stats_needs_a_file(capsys):
    assert run(["conll-stats"]) == 2
    assert "Missing argument" in capsys.readouterr().err


# ------------------------------------------------------------------ predict


def test_predict_writes_clusters_and_a_conll_response(tmp_path, tiny_tokenizer_dir):
    from coref_pipeline.formats.conll import read_conll
    from coref_pipeline.models.baseline import BaselineCorefModel
    from coref_pipeline.serving.coref_model import CorefModel
    from tests.models.tiny import tiny_config, tiny_encoder, tiny_hf_tokenizer

    # Segmented with the tiny model's own tokenizer (saved to a folder), as the model reads them.
    documents = tmp_path / "tiny.jsonlines"
    assert run(["minimize", str(TINY), str(documents), "--seg-len", "16", "--tokenizer", str(tiny_tokenizer_dir)]) == 0
    model = BaselineCorefModel(tiny_config(max_segment_len=16), tiny_encoder())
    CorefModel("baseline", model, tiny_hf_tokenizer()).save(tmp_path / "model")
    output, response = tmp_path / "out.jsonlines", tmp_path / "response.conll"
    argv = ["predict", "--model", str(tmp_path / "model"), str(documents), str(output)]
    assert run([*argv, "--gold-conll", str(TINY), "--conll", str(response)]) == 0
    [predicted] = read_jsonlines(output)
    assert "predicted_clusters" in predicted and predicted["doc_key"] == "bc/tiny/00/tiny_0000_0"
    [document] = read_conll(response, min_columns=1)
    assert document.doc_key == "bc/tiny/00/tiny_0000_0" and len(document.words) == 10
    assert run([*argv, "--precision", "32"]) == 0
    record = json.loads((tmp_path / "out.prediction.json").read_text())
    assert record["precision"] == "32" and record["computation"] == "fp32 on cpu"
    assert record["model_type"] == "baseline" and record["documents"] == 1
    exact = output.read_bytes()
    assert run([*argv, "--precision", "32"]) == 0 and output.read_bytes() == exact
    assert run([*argv, "--precision", "bf16-mixed"]) == 0
    [in_bf16] = read_jsonlines(output)
    assert in_bf16["doc_key"] == predicted["doc_key"] and "predicted_clusters" in in_bf16
    record = json.loads((tmp_path / "out.prediction.json").read_text())
    assert (
        record["precision"] == "bf16-mixed"
        and "the encoder and the antecedent scorers (coarse and fine) in bf16" in record["computation"]
    )


@pytest.fixture
def minilm_documents_and_tiny_model(tmp_path, tiny_tokenizer_dir):
    """Jsonlines segmented with MiniLM, and a model whose tokenizer is the tiny one (named after its folder)."""
    from coref_pipeline.models.baseline import BaselineCorefModel
    from coref_pipeline.serving.coref_model import CorefModel
    from tests.models.tiny import tiny_config, tiny_encoder, tiny_hf_tokenizer

    documents = tmp_path / "tiny.jsonlines"
    assert run(["minimize", str(TINY), str(documents), "--seg-len", "16", "--tokenizer", "embedded:minilm"]) == 0
    config = tiny_config(max_segment_len=16, tokenizer=str(tiny_tokenizer_dir))
    CorefModel("baseline", BaselineCorefModel(config, tiny_encoder()), tiny_hf_tokenizer()).save(tmp_path / "model")
    return documents, tmp_path / "model"


def test_predict_refuses_jsonlines_segmented_with_another_tokenizer(
    tmp_path, minilm_documents_and_tiny_model, tiny_tokenizer_dir, capsys
):
    documents, model = minilm_documents_and_tiny_model
    output, conll = tmp_path / "out.jsonlines", tmp_path / "out.conll"
    argv = ["predict", "--model", str(model), str(documents), str(output), "--gold-conll", str(TINY)]
    assert run([*argv, "--conll", str(conll)]) == 2
    line = one_error_line(capsys.readouterr().err, documents, "'embedded:minilm'", repr(str(tiny_tokenizer_dir)))
    assert "segmented with tokenizer" in line and "minimize" in line  # and how to re-segment them
    assert not output.exists() and not conll.exists()


def test_predict_without_a_segmentation_record_checks_the_vocabulary(tmp_path, minilm_documents_and_tiny_model, capsys):
    documents, model = minilm_documents_and_tiny_model
    sidecar_path(documents).unlink()
    output = tmp_path / "out.jsonlines"
    assert run(["predict", "--model", str(model), str(documents), str(output)]) == 2
    line = one_error_line(capsys.readouterr().err, documents, "bc/tiny/00/tiny_0000_0")
    assert "subtokens that the model's tokenizer does not know" in line and "'anna'" in line
    assert not output.exists()


def test_predict_reports_a_missing_model(tmp_path, capsys):
    source = tmp_path / "story.txt"
    source.write_text("Ada wrote.", encoding="utf-8")
    assert run(["predict", "--model", str(tmp_path / "none"), str(source), str(tmp_path / "o.jsonlines")]) == 2
    assert "not a coref-pipeline model directory" in capsys.readouterr().err


def test_predict_reads_its_input_before_loading_the_model(tmp_path, capsys):
    # The model directory does not exist: the input's error comes first.
    assert run(["predict", "--model", str(tmp_path / "none"), str(tmp_path / "no.jsonl"), str(tmp_path / "o")]) == 2
    one_error_line(capsys.readouterr().err, tmp_path / "no.jsonl", "no such file")


PARAGRAPH = (
    "Ada Lovelace met Charles Babbage in 1833; she was seventeen.  He showed her\n"
    "his engine — “a thinking machine” — and she understood it.\n\n"
    "Later, Ada wrote notes on it. Her notes were long!\n"
)


def test_predict_on_a_text_file_writes_offsets_conll_and_html(tmp_path, tiny_models):
    from coref_pipeline.formats.conll import read_conll

    _, incremental = tiny_models
    source = tmp_path / "lovelace.txt"
    source.write_text(PARAGRAPH, encoding="utf-8")
    output, conll, view = tmp_path / "out.jsonl", tmp_path / "out.conll", tmp_path / "view.html"
    argv = [
        "predict",
        "--model",
        str(incremental),
        str(source),
        str(output),
        "--conll",
        str(conll),
        "--html",
        str(view),
    ]
    assert run(argv) == 0
    [record] = read_jsonlines(output)
    assert record["doc_key"] == "lovelace" and record["text"] == PARAGRAPH
    assert record["clusters"], "the tiny model predicted no cluster"
    for chars, strings in zip(record["char_clusters"], record["mention_strings"], strict=True):
        assert [PARAGRAPH[start:end] for start, end in chars] == strings
    words = [word for sentence in record["sentences"] for word in sentence]
    for (start, end), word in zip(record["word_spans"], words, strict=True):
        assert PARAGRAPH[start:end] == word
    [document] = read_conll(conll)
    assert document.doc_key == "lovelace_0" and document.words == words  # document lovelace, part 0
    assert sorted(map(sorted, document.clusters)) == sorted(
        sorted(tuple(span) for span in cluster) for cluster in record["clusters"]
    )
    page = view.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "&#x27;" not in PARAGRAPH
    assert page.count('class="coref-mention"') >= sum(len(cluster) for cluster in record["clusters"])
    from tests.serving.test_visualize import parse_view

    assert "".join(parse_view(page).text) == PARAGRAPH


def test_predict_on_text_and_sentence_records(tmp_path, tiny_models):
    baseline, incremental = tiny_models
    source = tmp_path / "docs.jsonl"
    records = [
        {"text": PARAGRAPH, "doc_key": "para", "genre": "bc"},
        {"sentences": [["Ada", "wrote", "."], ["She", "smiled", "."]], "speakers": ["ada", "bob"]},
        {"text": ""},
    ]
    source.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    for model in (baseline, incremental):
        output = tmp_path / "out.jsonl"
        assert run(["predict", "--model", str(model), str(source), str(output)]) == 0
        written = read_jsonlines(output)
        assert [record["doc_key"] for record in written] == ["para", "docs/2", "docs/3"]
        assert written[1]["sentences"] == [["Ada", "wrote", "."], ["She", "smiled", "."]]
        assert written[1]["text"] == "Ada wrote .\nShe smiled ."
        assert written[2]["clusters"] == [] and written[2]["sentences"] == []


def stop_after(monkeypatch, count: int, received: list) -> None:
    """``predict_many`` stopped as by Ctrl-C or a kill after ``count`` documents; ``received`` counts what it gets."""
    from coref_pipeline.serving.coref_model import CorefModel

    predict_many = getattr(CorefModel.predict_many, "unstopped", CorefModel.predict_many)

    def stopped(self, documents, *args, **kwargs):
        documents = list(documents)
        received.append(len(documents))
        for number, result in enumerate(predict_many(self, documents, *args, **kwargs)):
            if number == count:
                raise KeyboardInterrupt
            yield result

    stopped.unstopped = predict_many
    monkeypatch.setattr(CorefModel, "predict_many", stopped)


def test_a_stopped_predict_goes_on_from_its_last_document(tmp_path, tiny_models, monkeypatch, caplog):
    """Stopped after two of five documents (and a record cut short after them, as a kill leaves it), the same
    command predicts the other three and writes the bytes of a run never stopped; other settings start again."""
    caplog.set_level(logging.INFO, logger="coref_pipeline")
    baseline, _ = tiny_models
    source = tmp_path / "docs.jsonl"
    texts = [f"Ada wrote note {n}. She sent it to Charles, and he read it {n + 1} times." for n in range(5)]
    source.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts), encoding="utf-8")
    argv = ["predict", "--model", str(baseline), "--precision", "32", str(source)]
    assert run([*argv, str(tmp_path / "whole.jsonl")]) == 0
    assert run([*argv, str(tmp_path / "whole_bc.jsonl"), "--genre", "bc"]) == 0
    output, partial = tmp_path / "out.jsonl", tmp_path / "out.jsonl.partial"
    received: list[int] = []
    stop_after(monkeypatch, 2, received)
    assert run([*argv, str(output)]) != 0
    assert not output.exists() and len(partial.read_text(encoding="utf-8").splitlines()) == 2
    with partial.open("a", encoding="utf-8") as handle:
        handle.write('{"doc_key": "docs/3", "te')
    stop_after(monkeypatch, 5, received)  # not stopped: counts what it is given
    assert run([*argv, str(output)]) == 0
    assert received == [5, 3]  # the three documents the stopped run had not written
    assert "Going on from a run before: 2 of 5 documents" in caplog.text
    assert output.read_bytes() == (tmp_path / "whole.jsonl").read_bytes()
    assert sorted(path.name for path in tmp_path.glob("out.*")) == ["out.jsonl", "out.prediction.json"]
    stop_after(monkeypatch, 2, received)
    assert run([*argv, str(output)]) != 0
    stop_after(monkeypatch, 5, received)
    assert run([*argv, str(output), "--genre", "bc"]) == 0  # other settings: all five predicted again
    assert received[-1] == 5 and output.read_bytes() == (tmp_path / "whole_bc.jsonl").read_bytes()


def test_predict_stopped_by_a_bad_document_keeps_those_before_it(tmp_path, tiny_models, capsys, caplog):
    caplog.set_level(logging.INFO, logger="coref_pipeline")
    source = tmp_path / "docs.jsonl"
    texts = ["Ada wrote a note.", "She sent it to Charles.", "Ada wrote a note. " * 40]
    source.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts), encoding="utf-8")
    argv = ["predict", "--model", str(tiny_models[0]), str(source), str(tmp_path / "o.jsonl"), "--max-subtokens", "50"]
    assert run(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress bar
    assert error.startswith("error: ") and str(tmp_path / "o.jsonl.partial") in error, error
    assert "max_inference_subtokens=50" in error and "the 2 documents before it are kept" in error, error
    assert not (tmp_path / "o.jsonl").exists()
    assert run([*argv[:-1], "400"]) == 0  # another length limit goes on after the two
    assert "Going on from a run before: 2 of 3 documents" in caplog.text
    assert [record["text"] for record in read_jsonlines(tmp_path / "o.jsonl")] == texts


def test_predict_in_two_workers_writes_every_document_in_order_and_stops_at_a_bad_one(
    tmp_path, tiny_models, capsys, caplog
):
    """``--workers 2``: the records of the input's documents in its order (each chunk's clusters are held to one
    process's in tests/serving/test_workers.py); a document a worker cannot predict stops the command with one
    line, the documents before it kept for the same command to go on after."""
    caplog.set_level(logging.INFO, logger="coref_pipeline")
    source = tmp_path / "docs.jsonl"
    texts = [f"Ada wrote note {n}. She sent it to Charles." for n in range(9)]
    source.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts), encoding="utf-8")
    for model in tiny_models:
        output = tmp_path / "out.jsonl"
        assert run(["predict", "--model", str(model), "--workers", "2", str(source), str(output)]) == 0
        assert "Predicting in 2 processes of one thread each" in caplog.text
        written = read_jsonlines(output)
        assert [record["doc_key"] for record in written] == [f"docs/{line}" for line in range(1, 10)]
        assert [record["text"] for record in written] == texts
    texts[7] = "Ada wrote a note. " * 40
    source.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts), encoding="utf-8")
    argv = ["predict", "--model", str(tiny_models[0]), "--workers", "2", str(source), str(tmp_path / "o.jsonl")]
    assert run([*argv, "--max-subtokens", "50"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress bar
    assert error.startswith("error: ") and "the 7 documents before it are kept" in error, error
    assert "max_inference_subtokens=50" in error, error
    assert run([*argv, "--max-subtokens", "400"]) == 0
    assert "Going on from a run before: 7 of 9 documents" in caplog.text


def test_predict_on_joshi_jsonlines_with_words_writes_conll_and_html(tmp_path, tiny_models, tiny_tokenizer_dir):
    from coref_pipeline.formats.conll import normalize_word, read_conll

    baseline, _ = tiny_models
    documents = tmp_path / "tiny.jsonlines"
    assert run(["minimize", str(TINY), str(documents), "--seg-len", "16", "--tokenizer", str(tiny_tokenizer_dir)]) == 0
    output, conll, view = tmp_path / "out.jsonlines", tmp_path / "out.conll", tmp_path / "out.html"
    argv = ["predict", "--model", str(baseline), str(documents), str(output), "--conll", str(conll)]
    assert run([*argv, "--html", str(view)]) == 0
    [predicted] = read_jsonlines(output)
    [gold] = read_conll(TINY)
    [written] = read_conll(conll)
    assert written.words == [normalize_word(word) for word in gold.words]  # the words minimize.py keeps
    assert written.doc_key == gold.doc_key
    assert written.sentence_ids == gold.sentence_ids
    assert "predicted_clusters" in predicted and view.is_file()


@pytest.mark.parametrize(
    ("content", "suffix", "message"),
    [
        ('{"text": "fine"}\n{"text": broken\n', ".jsonl", "in.jsonl:2: not valid JSON"),
        ('{"text": "fine"}\n\n{"txt": "typo"}\n', ".jsonl", "in.jsonl:3: a record needs exactly one of"),
        ('{"sentences": "Ada wrote."}\n', ".jsonl", "in.jsonl:1: 'sentences' must be a list of lists of words"),
        (
            '{"text": "a"}\n'
            '{"doc_key": "d", "sentences": [], "speakers": [], "sentence_map": [], "subtoken_map": []}\n',
            ".jsonl",
            "in.jsonl:2: the file mixes Joshi-format documents and text/sentence records",
        ),
        (
            '{"doc_key": "d", "sentences": [], "subtoken_map": []}\n',
            ".jsonl",
            "in.jsonl:1: a Joshi-format document without ['speakers', 'sentence_map']",
        ),
        ("text", ".csv", "expected a .txt file or jsonlines"),
    ],
)
def test_predict_input_errors_name_the_file_and_line(tmp_path, tiny_models, capsys, content, suffix, message):
    source = tmp_path / f"in{suffix}"
    source.write_text(content, encoding="utf-8")
    assert run(["predict", "--model", str(tiny_models[1]), str(source), str(tmp_path / "o.jsonl")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o.jsonl").exists()


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonlines"])
def test_predict_on_empty_jsonlines_leaves_the_output_as_it_was(tmp_path, tiny_models, capsys, suffix):
    output = tmp_path / "out.jsonl"
    output.write_bytes(b'{"text": "earlier"}\n')
    for content in ("", "\n  \n"):
        source = tmp_path / f"empty{suffix}"
        source.write_text(content, encoding="utf-8")
        assert run(["predict", "--model", str(tiny_models[1]), str(source), str(output)]) == 2
        assert one_error_line(capsys.readouterr().err) == f"error: {source}: no documents"
        assert output.read_bytes() == b'{"text": "earlier"}\n'


@pytest.mark.parametrize("suffix", [".jsonl", ".txt"])
def test_predict_on_a_binary_file(tmp_path, tiny_models, capsys, suffix):
    source = tmp_path / f"image{suffix}"
    source.write_bytes(BINARY)
    assert run(["predict", "--model", str(tiny_models[1]), str(source), str(tmp_path / "o.jsonl")]) == 2
    assert "not a UTF-8 text file" in one_error_line(capsys.readouterr().err, source)
    assert not (tmp_path / "o.jsonl").exists()


def test_predict_too_long_for_the_baseline_is_a_clear_error(tmp_path, tiny_models, capsys):
    source = tmp_path / "long.txt"
    source.write_text("Ada wrote a note. " * 40, encoding="utf-8")
    argv = ["predict", "--model", str(tiny_models[0]), str(source), str(tmp_path / "o.jsonl")]
    assert run([*argv, "--max-subtokens", "50"]) == 2
    error = capsys.readouterr().err
    assert "max_inference_subtokens=50" in error and "use the incremental model" in error
    assert run(["predict", "--model", str(tiny_models[1]), str(source), str(tmp_path / "o.jsonl")]) == 0


def test_predict_max_antecedents_is_for_the_baseline_and_the_coarse_floor_for_both(tmp_path, tiny_models, capsys):
    source = tmp_path / "text.txt"
    source.write_text("Ada wrote a note. She sent it to Charles. He read it twice. " * 3, encoding="utf-8")
    out = tmp_path / "o.jsonl"
    assert run(["predict", "--model", str(tiny_models[0]), "--max-antecedents", "1", str(source), str(out)]) == 0
    assert out.read_text(encoding="utf-8").count("\n") == 1
    capsys.readouterr()
    assert run(["predict", "--model", str(tiny_models[1]), "--max-antecedents", "1", str(source), str(out)]) == 2
    assert "max_top_antecedents is a baseline setting" in capsys.readouterr().err
    assert run(["predict", "--model", str(tiny_models[0]), "--min-coarse-score", "0", str(source), str(out)]) == 0
    capsys.readouterr()
    # The incremental model (score: calibrated) takes the floor too.
    assert run(["predict", "--model", str(tiny_models[1]), "--min-coarse-score", "0", str(source), str(out)]) == 0
    assert out.read_text(encoding="utf-8").count("\n") == 1
    capsys.readouterr()
    assert run(["predict", "--model", str(tiny_models[0]), "--max-antecedents", "0", str(source), str(out)]) == 2
    assert "--max-antecedents" in capsys.readouterr().err


def test_predict_html_on_jsonlines_without_words_is_refused_before_predicting(
    tmp_path, tiny_models, tiny_tokenizer_dir, capsys
):
    documents = tmp_path / "tiny.jsonlines"
    minimize = ["minimize", str(TINY), str(documents), "--seg-len", "16", "--no-tokens"]
    assert run([*minimize, "--tokenizer", str(tiny_tokenizer_dir)]) == 0
    argv = ["predict", "--model", str(tiny_models[0]), str(documents), str(tmp_path / "o.jsonl")]
    assert run([*argv, "--html", str(tmp_path / "v.html")]) == 2
    assert "without the 'tokens' field" in capsys.readouterr().err and not (tmp_path / "o.jsonl").exists()
    assert run([*argv, "--gold-conll", str(TINY), "--conll", str(tmp_path / "r.conll")]) == 0


def test_predict_gold_conll_needs_conll_and_joshi_input(tmp_path, tiny_models, capsys):
    source = tmp_path / "story.txt"
    source.write_text("Ada wrote.", encoding="utf-8")
    argv = [
        "predict",
        "--model",
        str(tiny_models[1]),
        str(source),
        str(tmp_path / "o.jsonl"),
        "--gold-conll",
        str(TINY),
    ]
    assert run(argv) == 2
    one_error_line(capsys.readouterr().err, "--gold-conll needs --conll")
    assert run([*argv, "--conll", str(tmp_path / "r.conll")]) == 2
    one_error_line(capsys.readouterr().err, "--gold-conll is for Joshi-format input")
    assert not (tmp_path / "o.jsonl").exists()


def test_predict_with_a_broken_segmentation_record_names_it(tmp_path, minilm_documents_and_tiny_model, capsys):
    documents, model = minilm_documents_and_tiny_model
    sidecar_path(documents).write_text("{not json", encoding="utf-8")
    output = tmp_path / "out.jsonlines"
    assert run(["predict", "--model", str(model), str(documents), str(output)]) == 2
    one_error_line(capsys.readouterr().err, sidecar_path(documents))
    assert not output.exists()


def test_predict_names_a_field_shorter_than_the_segments(tmp_path, tiny_models, capsys):
    documents = tmp_path / "tiny.jsonlines"
    assert run(["minimize", str(TINY), str(documents), "--seg-len", "16", "--no-tokens"]) == 0
    record = json.loads(documents.read_text().splitlines()[0])
    record["subtoken_map"] = record["subtoken_map"][:-2]
    bad = tmp_path / "bad.jsonlines"
    bad.write_text(json.dumps(record) + "\n")
    output = tmp_path / "o.jsonl"
    output.write_text("earlier output\n")
    assert run(["predict", "--model", str(tiny_models[0]), str(bad), str(output)]) == 2
    total = sum(len(segment) for segment in record["sentences"])
    expected = f"{bad}:1: field 'subtoken_map' has {total - 2} entries for {total} subtokens in 'sentences'"
    assert expected in capsys.readouterr().err
    assert output.read_text() == "earlier output\n"
