"""The reference scorer v8.01's 36 test cases (../shared/scorer-cases) scored by our implementation."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from coref_pipeline.evaluation import score_files

CASES_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "scorer-cases"
TOLERANCE = 1e-5
PLACEHOLDER = [1.0, 1.0, 1.0]

# expected.json copies ten values that are commented out in the upstream
# test/CorefMetricTestConfig.pm, where they are only "[1, 1, 1]" placeholders
# (the upstream test never checks them, and scorer.pl v8.01 itself does not
# give 1 there). While expected.json holds the placeholder, we check these
# values, worked out by hand below (k = key cluster, r = response cluster):
#
# B1: key k1 = {(1,12), (47,47)}, k2 = {(29,31), (62,63), (66,66)};
#     response r1 = {(29,31), (47,47), (54,58)}, r2 = {(62,63), (66,66)}.
#     MUC: k1 -> 0 links kept ((1,12) missing), k2 split in 2 -> 1 of 2; R = 1/3.
#          r1 spans k2, k1 and a twinless mention -> 0, r2 -> 1; P = 1/3.
#     B³:  R = (1²/2 + 1²/3 + 2²/3) / 5 = 13/30; P = (1²/3 + 1²/3 + 2²/2) / 5 = 8/15.
# C1: B1 plus k3 = r3 = {(69,69), (70,70)}.
#     MUC: R = (0 + 1 + 1) / 4, P = (0 + 1 + 1) / 4.
#     B³:  R = (13/6 + 2²/2) / 7 = 25/42; P = (8/3 + 2²/2) / 7 = 2/3.
# D1: k1 = 5 one-word mentions, k2 = 2, k3 = 5; r1 = k1, r3 = k2 ∪ k3 (7).
#     CEAF-m: k1-r1 (5) + k3-r3 (5) = 10; R = P = 10/12.
#     CEAF-e: k1-r1 2·5/10 = 1, k3-r3 2·5/12 = 5/6 -> 11/6; R = 11/18, P = 11/12.
#     BLANC: coref links key 10+1+10 = 21, response 10+21 = 31, common 21;
#            non-coref key 66-21 = 45, response 66-31 = 35, common 35.
#            R = (1 + 35/45)/2 = 8/9, P = (21/31 + 1)/2 = 26/31,
#            F = (F_c + F_n)/2 = (21/26 + 7/8)/2 = 175/208.
# E1: key as D1; r1 = k1 ∪ k3 (10), r2 = k2.
#     CEAF-m: k1-r1 (5) + k2-r2 (2) = 7; R = P = 7/12.
#     CEAF-e: k1-r1 2·5/15 = 2/3, k2-r2 2·2/4 = 1 -> 5/3; R = 5/9, P = 5/6.
#     BLANC: coref key 21, response 45+1 = 46, common 21; non-coref key 45, response 20, common 20.
#            R = (1 + 20/45)/2 = 13/18, P = (21/46 + 1)/2 = 67/92, F = (42/67 + 8/13)/2.


def _rpf(recall: float, precision: float) -> list[float]:
    return [recall, precision, 2 * recall * precision / (recall + precision)]


CORRECTED_PLACEHOLDERS: dict[tuple[str, str], list[float]] = {
    ("B1", "muc"): _rpf(1 / 3, 1 / 3),
    ("B1", "bcub"): _rpf(13 / 30, 8 / 15),
    ("C1", "muc"): _rpf(2 / 4, 2 / 4),
    ("C1", "bcub"): _rpf(25 / 42, 2 / 3),
    ("D1", "ceafm"): _rpf(10 / 12, 10 / 12),
    ("D1", "ceafe"): _rpf(11 / 18, 11 / 12),
    ("D1", "blanc"): [8 / 9, 26 / 31, 175 / 208],
    ("E1", "ceafm"): _rpf(7 / 12, 7 / 12),
    ("E1", "ceafe"): _rpf(5 / 9, 5 / 6),
    ("E1", "blanc"): [13 / 18, 67 / 92, (42 / 67 + 8 / 13) / 2],
}


def _load_expected() -> dict[str, dict]:
    path = CASES_DIR / "expected.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


EXPECTED = _load_expected()


def _require_cases() -> None:
    if not EXPECTED:
        pytest.skip(f"../shared/scorer-cases not found: no expected.json in {CASES_DIR}")


def _expected_value(case: str, metric: str) -> list[float]:
    value = EXPECTED[case]["metrics"][metric]
    if (case, metric) in CORRECTED_PLACEHOLDERS and value == PLACEHOLDER:
        return CORRECTED_PLACEHOLDERS[(case, metric)]
    return value


def test_all_36_cases_are_there() -> None:
    _require_cases()
    assert len(EXPECTED) == 36
    for spec in EXPECTED.values():
        assert (CASES_DIR / spec["key"]).is_file() and (CASES_DIR / spec["response"]).is_file()


@pytest.mark.parametrize("case", sorted(EXPECTED) or ["(no cases)"])
def test_reference_case(case: str, caplog: pytest.LogCaptureFixture) -> None:
    _require_cases()
    spec = EXPECTED[case]
    metrics = list(spec["metrics"])
    with caplog.at_level(logging.WARNING, logger="coref_pipeline.evaluation"):
        scores = score_files(CASES_DIR / spec["key"], CASES_DIR / spec["response"], metrics)
    for metric in metrics:
        expected = _expected_value(case, metric)
        got = [scores[metric].recall, scores[metric].precision, scores[metric].f1]
        assert got == pytest.approx(expected, abs=TOLERANCE), f"{case} {metric}: got {got}, expected {expected}"


def test_a9_repeated_mentions_are_reported_and_dropped(caplog: pytest.LogCaptureFixture) -> None:
    """A9 repeats the key mention (3, 6) ten times in a second cluster: each repeat is named, the rest scored."""
    _require_cases()
    spec = EXPECTED["A9"]
    with caplog.at_level(logging.WARNING, logger="coref_pipeline.evaluation"):
        scores = score_files(CASES_DIR / spec["key"], CASES_DIR / spec["response"], ["muc", "bcub"])
    repeats = [record.getMessage() for record in caplog.records if "repeated mention" in record.getMessage()]
    assert len(repeats) == 10
    assert all("'LuoTestCase'" in message and "(3, 6)" in message and "response" in message for message in repeats)
    # Scored as the same response with the repeats removed (A8/A4): MUC 1/3, 1/3.
    assert scores["muc"].recall == pytest.approx(1 / 3)
    assert scores["muc"].precision == pytest.approx(1 / 3)
    assert scores.mentions.precision_den == 7  # distinct response mentions


def test_placeholder_corrections_are_needed() -> None:
    """Every corrected entry still holds the upstream placeholder; drop the correction once expected.json is fixed."""
    _require_cases()
    for case, metric in CORRECTED_PLACEHOLDERS:
        assert EXPECTED[case]["metrics"][metric] == PLACEHOLDER, (case, metric)
