"""Breakdown by length, speakers and genre (Xia et al. 2020, Table 2)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from coref_pipeline.evaluation import score_documents
from coref_pipeline.evaluation.breakdown import (
    DocumentInfo,
    breakdown_table,
    count_speakers,
    document_info,
    document_table,
    length_bucket,
    plot_f1_by_length,
    read_document_infos,
    speaker_group,
)

a, b, c, d, e = ((word, word) for word in range(5))


@pytest.mark.parametrize(
    ("length", "bucket"),
    [
        (0, "0-128"),
        (128, "0-128"),
        (129, "129-256"),
        (256, "129-256"),
        (257, "257-512"),
        (512, "257-512"),
        (513, "513-768"),
        (768, "513-768"),
        (769, "769-1152"),
        (1152, "769-1152"),
        (1153, "1153+"),
        (50_000, "1153+"),
    ],
)
def test_length_buckets(length: int, bucket: str) -> None:
    assert length_bucket(length) == bucket


def test_negative_length_is_an_error() -> None:
    with pytest.raises(ValueError):
        length_bucket(-1)


def test_speaker_counts() -> None:
    assert count_speakers([["[SPL]", "-", "-", "[SPL]"]]) == 1  # only the placeholder speaker
    assert count_speakers([]) == 1
    assert count_speakers([["[SPL]", "Ann", "Ann", "[SPL]"], ["[SPL]", "Bob", "-", "[SPL]"]]) == 2
    assert count_speakers(["Ann", "Bob", "Cy"]) == 3
    assert [speaker_group(n) for n in (1, 2, 5)] == ["1", "2+", "2+"]


def test_document_info_from_jsonlines() -> None:
    document = {
        "doc_key": "bc/cnn/00/cnn_0001_0",
        "subtoken_map": list(range(130)),
        "speakers": [["[SPL]"] + ["Speaker#1"] * 60 + ["[SPL]"], ["[SPL]"] + ["Speaker#2"] * 66 + ["[SPL]"]],
    }
    info = document_info(document)
    assert (info.length, info.bucket, info.speakers, info.genre) == (130, "129-256", 2, "bc")
    assert document_info({"doc_key": "940_the_last_of_the_mohicans", "subtoken_map": [0]}, "lit").genre == "lit"


def test_read_document_infos(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonlines"
    rows = [{"doc_key": "nw/x_0", "subtoken_map": [0] * 10, "speakers": [["-"] * 10]}]
    rows.append({"doc_key": "tc/y_0", "subtoken_map": [0] * 700, "speakers": [["A", "B"]]})
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n", encoding="utf-8")
    infos = read_document_infos(path)
    assert infos["nw/x_0"] == DocumentInfo("nw/x_0", 10, 1, "nw")
    assert infos["tc/y_0"] == DocumentInfo("tc/y_0", 700, 2, "tc")


def _two_short_one_long():
    # short1: MUC/B³/CEAF-e all 1.
    # short2: key {a,b,c,d} (3 links) vs response {a,b} {c,d}: MUC R 2/3, P 2/2.
    # long:   key {a,b} vs response {a} {b}: MUC R 0/1.
    key = {"short1": [[a, b]], "short2": [[a, b, c, d]], "long": [[a, b]]}
    response = {"short1": [[a, b]], "short2": [[a, b], [c, d]], "long": [[a], [b]]}
    infos = {
        "short1": DocumentInfo("short1", 100, 1, "nw"),
        "short2": DocumentInfo("short2", 120, 2, "bc"),
        "long": DocumentInfo("long", 2000, 1, "nw"),
    }
    return score_documents(key, response), infos


def test_breakdown_pools_each_group() -> None:
    scores, infos = _two_short_one_long()
    table = breakdown_table(scores, infos)
    short = table[(table.category == "length") & (table.group == "0-128")].iloc[0]
    assert short.documents == 2
    # Pooled over short1 + short2:
    # MUC  R (1+2)/(1+3) = 3/4, P (1+2)/(1+2) = 1            -> F1 6/7
    # B³   R (2 + 2·(2²/4))/(2+4) = 4/6, P (2 + 4)/(2+4) = 1  -> F1 4/5
    # CEAF-e: short1 1 of 1|1; short2 best a,b-pair 2·2/6 of 1 key | 2 response -> R (1+2/3)/2, P (1+2/3)/3
    ceafe_r, ceafe_p = (1 + 2 / 3) / 2, (1 + 2 / 3) / 3
    expected = (6 / 7 + 4 / 5 + 2 * ceafe_r * ceafe_p / (ceafe_r + ceafe_p)) / 3
    assert short.conll_f1 == pytest.approx(expected)
    empty = table[(table.category == "length") & (table.group == "129-256")].iloc[0]
    assert empty.documents == 0 and math.isnan(empty.conll_f1)
    assert list(table[table.category == "length"].group) == [
        "0-128",
        "129-256",
        "257-512",
        "513-768",
        "769-1152",
        "1153+",
    ]
    speakers = table[table.category == "speakers"].set_index("group")
    assert speakers.loc["1", "documents"] == 2 and speakers.loc["2+", "documents"] == 1
    assert list(table[table.category == "genre"].group) == ["bc", "nw"]
    assert table[(table.category == "genre") & (table.group == "bc")].iloc[0].conll_f1 == pytest.approx(
        scores.document("short2").conll_f1
    )


def test_document_table() -> None:
    scores, infos = _two_short_one_long()
    table = document_table(scores, infos)
    assert list(table.columns[:5]) == ["doc_key", "length", "bucket", "speakers", "genre"]
    assert {"muc_r", "muc_p", "muc_f1", "bcub_f1", "ceafe_f1", "conll_f1"} <= set(table.columns)
    row = table.set_index("doc_key").loc["short2"]
    assert (row.bucket, row.muc_r, row.muc_p) == ("0-128", pytest.approx(2 / 3), pytest.approx(1.0))
    assert table.set_index("doc_key").loc["long", "bucket"] == "1153+"


def test_breakdown_needs_every_document_info() -> None:
    scores, infos = _two_short_one_long()
    del infos["long"]
    with pytest.raises(ValueError, match="long"):
        breakdown_table(scores, infos)


def test_plot_writes_a_png(tmp_path: Path) -> None:
    scores, infos = _two_short_one_long()
    path = plot_f1_by_length(breakdown_table(scores, infos), tmp_path / "plots" / "f1_by_length.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
