"""The ``score`` subcommand on small files."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from coref_pipeline.evaluation.cli import add_score_parser

from .conll_helpers import write_conll

BCUB_F1 = 2 * (5 / 6) * (7 / 9) / (5 / 6 + 7 / 9)
CONLL_F1 = (2 / 3 + BCUB_F1 + (0.8 + 2 / 3 + 1) / 3) / 3  # pooled MUC, B³ and CEAF-e F1 of the files below


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="coref-pipeline")
    add_score_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


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


def test_bad_conll(files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key, _ = files
    bad = tmp_path / "bad.conll"
    bad.write_text("#begin document (d); part 000\nd 0 0 w (1\n#end document\n", encoding="utf-8")
    assert run(["score", str(key), str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.conll" in err and len(err.strip().splitlines()) == 1


def test_document_mismatch(files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key, _ = files
    other = write_conll(tmp_path / "other.conll", {"d": (6, [[(0, 0), (1, 1)]])})
    assert run(["score", str(key), str(other)]) == 2
    err = capsys.readouterr().err
    assert "'e_0'" in err and len(err.strip().splitlines()) == 1


def test_unknown_metric_is_a_usage_error(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    key, response = files
    with pytest.raises(SystemExit) as exit_info:
        run(["score", str(key), str(response), "--metrics", "muc,bleu"])
    assert exit_info.value.code == 2
    assert "bleu" in capsys.readouterr().err
