"""The project's own style rules (pyproject.toml's ruff settings: lint and layout, lines of at most 120 characters) hold
for its Python code and notebook, so that a line the formatter leaves long (a docstring, a message) is caught."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.paths import PROJECT_ROOT

CODE = ("src", "tests", "benchmarks", ".ci", "notebooks")  # the Python of the checkout (the docs' snippets are prose)

pytest.importorskip("ruff", reason="ruff comes with the test extras: pip install -e '.[test]'")


def ruff(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *arguments, "--no-cache", *CODE],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )


def test_ruff_finds_no_fault():
    result = ruff("check", "--output-format", "concise")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_file_is_laid_out_as_ruff_format_lays_it_out():
    result = ruff("format", "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_long_line_is_a_fault(tmp_path):
    """The rule the checks above rely on is on: a 121-character comment fails them."""
    long = tmp_path / "long.py"
    long.write_text("# " + "x" * 119 + "\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-cache",
            "--config",
            str(PROJECT_ROOT / "pyproject.toml"),
            str(long),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1 and "E501" in result.stdout, result.stdout + result.stderr
