"""``coref-pipeline score`` on small files, its start-up, and its fast reading of the two files."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from coref_pipeline.cli import main
from coref_pipeline.evaluation import read_clusters, scoring
from coref_pipeline.formats.conll import SCORER_READING, ConllFormatError, read_conll
from tests.evaluation.conll_helpers import write_conll
from tests.paths import FIXTURES, PROJECT_ROOT, SHARED_DIR

BCUB_F1 = 2 * (5 / 6) * (7 / 9) / (5 / 6 + 7 / 9)
CONLL_F1 = (2 / 3 + BCUB_F1 + (0.8 + 2 / 3 + 1) / 3) / 3  # pooled MUC, B³ and CEAF-e F1 of the files below


def run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    return exited.value.code


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    # doc "d": key {0,1} {2,3}; response {0,1,2} {3}.
    # MUC: R 1/2 (the first link kept), P 1/2. B³: R (1 + 1 + 1/2 + 1/2)/4 = 3/4, P (2/3 + 2/3 + 1/3 + 1)/4 = 2/3.
    # CEAF-e: {0,1}-{0,1,2} 2·2/5 = 0.8, {2,3}-{3} 2·1/3 -> total 0.8 + 2/3 of 2 key | 2 response clusters.
    # doc "e": identical key and response {4,5}.
    key = write_conll(
        tmp_path / "key.conll", {"d": (6, [[(0, 0), (1, 1)], [(2, 2), (3, 3)]]), "e": (6, [[(4, 4), (5, 5)]])}
    )
    response = write_conll(
        tmp_path / "response.conll", {"d": (6, [[(0, 0), (1, 1), (2, 2)], [(3, 3)]]), "e": (6, [[(4, 4), (5, 5)]])}
    )
    return key, response


def test_table_with_conll_row(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    key, response = files
    assert run(["score", str(key), str(response)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["Metric", "Recall", "Precision", "F1"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    # pooled MUC: R (1+1)/(2+1), P (1+1)/(2+1).
    assert rows["muc"] == ["66.67", "66.67", "66.67"]
    # pooled B³: R (3 + 2)/(4 + 2) = 5/6, P (8/3 + 2)/(4 + 2) = 7/9, F1 2·(5/6)(7/9)/(5/6 + 7/9) = 0.80460.
    assert rows["bcub"] == ["83.33", "77.78", "80.46"]
    # pooled CEAF-e: (0.8 + 2/3 + 1) / 3 both ways = 0.82222.
    assert rows["ceafe"] == ["82.22", "82.22", "82.22"]
    assert rows["mentions"] == ["100.00", "100.00", "100.00"]
    assert rows["CoNLL"] == [f"{100 * CONLL_F1:.2f}"]
    assert list(rows) == ["mentions", "muc", "bcub", "ceafe", "CoNLL"]


def test_no_conll_row_without_the_three_metrics(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    key, response = files
    assert run(["score", str(key), str(response), "--metrics", "muc,blanc,lea"]) == 0
    out = capsys.readouterr().out
    assert "CoNLL" not in out
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["mentions", "muc", "blanc", "lea"]


def test_json_has_raw_counts_and_documents(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    key, response = files
    assert run(["score", str(key), str(response), "--json", "--per-document", "--metrics", "muc,bcub,ceafe,blanc"]) == 0
    result = json.loads(capsys.readouterr().out)
    muc = result["metrics"]["muc"]
    assert (muc["recall_num"], muc["recall_den"], muc["precision_num"], muc["precision_den"]) == (2, 3, 2, 3)
    assert result["metrics"]["blanc"]["coreference"]["recall_den"] == 3  # 1 + 1 + 1 key links
    assert result["num_documents"] == 2
    assert set(result["documents"]) == {"d_0", "e_0"}
    assert result["documents"]["d_0"]["metrics"]["muc"]["recall"] == pytest.approx(0.5)
    assert result["conll_f1"] == pytest.approx(CONLL_F1)


def test_per_document_rows(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    key, response = files
    assert run(["score", str(key), str(response), "--per-document", "--metrics", "muc"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["Document", "Metric", "Recall", "Precision", "F1"]
    rows = [line.split() for line in lines[1:]]
    assert ["d_0", "muc", "50.00", "50.00", "50.00"] in rows
    assert ["e_0", "muc", "100.00", "100.00", "100.00"] in rows
    assert ["(corpus)", "muc", "66.67", "66.67", "66.67"] in rows


def test_remove_singletons_flag(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    key, response = files
    assert run(["score", str(key), str(response), "--json", "--remove-singletons", "--metrics", "bcub"]) == 0
    bcub = json.loads(capsys.readouterr().out)["metrics"]["bcub"]
    # the response singleton {3} is gone: 5 response mentions instead of 6.
    assert (bcub["recall_den"], bcub["precision_den"]) == (6, 5)


def test_missing_file(files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key, _ = files
    assert run(["score", str(key), str(tmp_path / "nope.conll")]) == 2
    err = capsys.readouterr().err
    assert "nope.conll" in err and len(err.strip().splitlines()) == 1


def test_the_key_error_comes_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["score", str(tmp_path / "no_key.conll"), str(tmp_path / "no_response.conll")]) == 2
    err = capsys.readouterr().err
    assert err == f"score: error: {tmp_path / 'no_key.conll'}: no such file\n"


def test_bad_conll(files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key, _ = files
    bad = tmp_path / "bad.conll"
    bad.write_text("#begin document (d); part 000\nd 0 0 w (1\n#end document\n", encoding="utf-8")
    assert run(["score", str(key), str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.conll" in err and len(err.strip().splitlines()) == 1


def test_binary_file(files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key, _ = files
    binary = tmp_path / "image.conll"
    binary.write_bytes(bytes(range(256)) * 4)
    assert run(["score", str(key), str(binary)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"score: error: {binary}:") and "not a UTF-8 text file" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_document_mismatch(files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key, _ = files
    other = write_conll(tmp_path / "other.conll", {"d": (6, [[(0, 0), (1, 1)]])})
    assert run(["score", str(key), str(other)]) == 2
    err = capsys.readouterr().err
    assert "'e_0'" in err and len(err.strip().splitlines()) == 1


def test_unknown_metric_is_a_usage_error(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    key, response = files
    with pytest.raises(SystemExit) as exit_info:
        main(["score", str(key), str(response), "--metrics", "muc,bleu"])
    assert exit_info.value.code == 2
    assert "bleu" in capsys.readouterr().err


def test_missing_response_argument_is_a_usage_error(files: tuple[Path, Path], capsys) -> None:
    key, _ = files
    assert run(["score", str(key)]) == 2
    assert "Missing argument 'RESPONSE.conll'" in capsys.readouterr().err


def test_score_imports_neither_torch_nor_pandas(files: tuple[Path, Path]) -> None:
    """The whole process, as a user runs it: the lazy group loads the scorer and nothing else."""
    key, response = files
    completed = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "coref_pipeline", "score", str(key), str(response)],
        capture_output=True,
        text=True,
        check=False,
        cwd=PROJECT_ROOT,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines()[1].split()[0] == "mentions"
    # Every ``import`` statement is listed (the subcommand's own module, loaded by importlib, is not).
    imported = {line.rsplit("|", 1)[-1].strip() for line in completed.stderr.splitlines() if "|" in line}
    assert {"coref_pipeline.evaluation.scoring", "numpy"} <= imported
    heavy = {name for name in imported if name.split(".")[0] in {"torch", "transformers", "pandas", "kedro", "sklearn"}}
    assert not heavy, sorted(heavy)
    assert (
        not {"coref_pipeline.serving.coref_model", "coref_pipeline.cli.predict", "coref_pipeline.cli.minimize"}
        & imported
    )
    # CEAF's assignment solver comes without the rest of scipy.optimize (half a second of imports).
    assert "scipy.optimize" not in imported and "scipy.linalg" not in imported


# ------------------------------------------------------------------ the fast reading of the files


def reference_reading(path: Path) -> dict[str, list[list[tuple[int, int]]]] | str:
    """What ``read_clusters`` gave before its fast path (``read_conll``), or the error's message."""
    try:
        documents = read_conll(path, **SCORER_READING)
    except ConllFormatError as error:
        return str(error)
    clusters_by_doc = {}
    for document in documents:
        if document.doc_key in clusters_by_doc:
            return f"{path}: document {document.doc_key!r} appears more than once"
        clusters_by_doc[document.doc_key] = [cluster for cluster in document.clusters if cluster]
    return clusters_by_doc


def reading(path: Path) -> dict[str, list[list[tuple[int, int]]]] | str:
    try:
        return read_clusters(path)
    except ValueError as error:  # ConllFormatError, or a repeated document
        return str(error)


def shared_files() -> list[Path]:
    return sorted((SHARED_DIR / "scorer-cases").glob("TC-*")) + sorted((SHARED_DIR / "corpora").glob("*/*.conll"))


@pytest.mark.parametrize("path", [FIXTURES / "tiny.v4_gold_conll", *shared_files()], ids=lambda path: path.name)
def test_reading_equals_read_conll_on_real_files(path: Path) -> None:
    assert reading(path) == reference_reading(path)


HEADER = "#begin document (doc); part 000\n"
END = "#end document\n"


def row(word: int, cell: str, separator: str = "\t") -> str:
    return separator.join(["doc", "0", str(word), f"w{word}", "NN", cell]) + "\n"


EDGE_CASES = {
    "nested same cluster": HEADER + row(0, "(1|(1") + row(1, "1)") + row(2, "1)") + END,
    "run-together brackets": HEADER + row(0, "(1(2") + row(1, "2)1)") + row(2, "(3)(4)") + END,
    "reference order in a cell": HEADER + row(0, "(2") + row(1, "2)|(1)|(3") + row(2, "3)") + END,
    "first bracket decides the cluster order": HEADER + row(0, "(7") + row(1, "(3)") + row(2, "7)") + END,
    "long cluster ids": HEADER + row(0, "(1234567)") + row(1, "(1234567") + row(2, "1234567)|(99999)") + END,
    "zero-padded ids": HEADER + row(0, "(007)") + row(1, "(7)") + END,
    "spaces between columns": HEADER + row(0, "(1)", " ") + row(1, "-", "   ") + row(2, "(1)", " \t ") + END,
    "trailing whitespace": HEADER + "doc 0 0 w (1)  \n" + "doc 0 1 w -\t\n" + "doc 0 2 w (1)\u00a0\n" + END,
    "whitespace-only lines": HEADER + row(0, "(1)") + " \t\n\u00a0\n" + row(1, "(1)") + "\n" + END,
    "one-column rows": HEADER + "(1)\n-\n(1)\n" + END,
    "a comment line is a row": HEADER + row(0, "(1)") + "# note\n" + row(1, "(1)") + END,
    "header without a part": "#begin document (LuoTestCase); \n" + row(0, "(1)") + END,
    "blank lines between documents": "\n"
    + HEADER
    + row(0, "(1)")
    + END
    + "\n \n"
    + HEADER.replace("000", "001")
    + row(0, "-")
    + END,
    "no final newline": HEADER + row(0, "(1)") + END.rstrip("\n"),
    "CRLF line ends": (HEADER + row(0, "(1)") + row(1, "(1)") + END).replace("\n", "\r\n"),
    "UTF-8 byte-order mark": "\ufeff" + HEADER + row(0, "(1)") + row(1, "(1)") + END,
    "Unicode line separator": HEADER + "doc 0 0 a\u2028b (1)\n" + row(1, "(1)") + END,
    "Unicode words": HEADER + "doc 0 0 “Ahab” (1)\n" + "doc 0 1 — -\n" + "doc 0 2 naïve (1)\n" + END,
    "underscore cell": HEADER + row(0, "_") + row(1, "(1)") + END,
    "repeated mention": HEADER + row(0, "(1)|(1)") + row(1, "(1)") + END,
    "empty file": "",
    "only blank lines": "\n\n",
    # errors: the same message either way
    "unbalanced close": HEADER + row(0, "1)") + END,
    "unclosed open": HEADER + row(0, "(1") + END,
    "unknown annotation": HEADER + row(0, "(1)x") + END,
    "dash glued to a number": HEADER + row(0, "1-") + END,
    "empty part": HEADER + row(0, "(1)||(2)") + END,
    "empty document": HEADER + "\n" + END,
    "row outside a document": row(0, "(1)") + HEADER + row(0, "(1)") + END,
    "no end": HEADER + row(0, "(1)"),
    "end without begin": END,
    "repeated document": HEADER + row(0, "(1)") + END + HEADER + row(0, "(1)") + END,
}


# Read by the fast path (the others go to read_conll: errors, comment lines, other line breaks).
FAST_CASES = [
    name
    for name in list(EDGE_CASES)[: list(EDGE_CASES).index("unbalanced close")]
    if name not in {"a comment line is a row", "CRLF line ends", "UTF-8 byte-order mark", "Unicode line separator"}
]


@pytest.mark.parametrize("name", list(EDGE_CASES))
def test_reading_equals_read_conll_on_edge_cases(tmp_path: Path, name: str) -> None:
    path = tmp_path / "case.conll"
    path.write_bytes(EDGE_CASES[name].encode("utf-8"))
    assert reading(path) == reference_reading(path)
    assert (scoring._read_clusters_fast(path) is not None) == (name in FAST_CASES)


@pytest.mark.parametrize("name", ["CRLF line ends", "UTF-8 byte-order mark"])
def test_a_byte_order_mark_and_crlf_read_as_their_plain_twin(tmp_path: Path, name: str) -> None:
    plain, variant = tmp_path / "plain.conll", tmp_path / "variant.conll"
    plain.write_bytes((HEADER + row(0, "(1)") + row(1, "(1)") + END).encode("utf-8"))
    variant.write_bytes(EDGE_CASES[name].encode("utf-8"))
    assert reading(variant) == reading(plain) and reading(plain)


def random_document(rng: random.Random, number: int) -> str:
    """A document with random mentions (nested, same-cluster, several per cell), sometimes malformed."""
    num_words = rng.randint(1, 30)
    opens: dict[int, list[str]] = {}
    closes: dict[int, list[str]] = {}
    singles: dict[int, list[str]] = {}
    for _ in range(rng.randint(0, 12)):
        cluster = rng.choice([rng.randint(0, 5), rng.randint(0, 200000)])
        start = rng.randrange(num_words)
        end = min(num_words - 1, start + rng.choice([0, 0, 1, 2, 5]))
        if start == end:
            singles.setdefault(start, []).append(f"({cluster})")
        else:
            opens.setdefault(start, []).append(f"({cluster}")
            closes.setdefault(end, []).append(f"{cluster})")
    lines = [f"#begin document (d{number}); part {number % 3:03d}\n"]
    for word in range(num_words):
        parts = closes.get(word, []) + singles.get(word, []) + opens.get(word, [])
        rng.shuffle(parts)
        cell = "|".join(parts) if parts else "-"
        if rng.random() < 0.003:
            cell = rng.choice(["(x)", "1)", "(3", "()", "-)"])  # an error now and then
        lines.append(row(word, cell, rng.choice(["\t", " ", "\t\t"])))
        if rng.random() < 0.15:
            lines.append("\n")
    lines.append(END)
    return "".join(lines)


def test_reading_equals_read_conll_on_random_files(tmp_path: Path) -> None:
    read_fast = 0
    for seed in range(60):
        rng = random.Random(seed)
        path = tmp_path / f"random{seed}.conll"
        text = "".join(random_document(rng, number) for number in range(rng.randint(1, 6)))
        path.write_text(text, encoding="utf-8")
        assert reading(path) == reference_reading(path), seed
        read_fast += scoring._read_clusters_fast(path) is not None
    assert read_fast >= 40  # most files have no error
