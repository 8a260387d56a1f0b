"""The reference scorer v8.01's 36 test cases (../shared/scorer-cases) scored by our implementation."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from coref_pipeline.evaluation import score_files

CASES_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "scorer-cases"
TOLERANCE = 1e-5


def _load_expected() -> dict[str, dict]:
    path = CASES_DIR / "expected.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


EXPECTED = _load_expected()


def _require_cases() -> None:
    if not EXPECTED:
        pytest.skip(f"../shared/scorer-cases not found: no expected.json in {CASES_DIR}")


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
        expected = spec["metrics"][metric]
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
