"""Files written whole or not at all: a reader (or a killed run) never sees half of one.

Every writer in the project goes through :func:`atomic_path`: the content is
written to a temporary name beside the target and renamed into place, which
POSIX makes atomic on one file system.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from coref_pipeline.errors import UserError


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; renamed onto ``path`` when the block ends without error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_path(path) as temporary:
        temporary.write_text(text, encoding="utf-8")


def atomic_write_json(data: Any, path: str | Path) -> None:
    """Write ``data`` as indented JSON with sorted keys to ``path`` atomically."""
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_jsonlines(path: str | Path, records: Any) -> None:
    """One JSON object a line, atomically."""
    atomic_write_text(path, "".join(json.dumps(record) + "\n" for record in records))


class JsonLinesError(UserError, ValueError):
    """A jsonlines file that cannot be read; the message names the file and line."""


def read_jsonlines(path: str | Path) -> list[dict[str, Any]]:
    """The JSON objects of a jsonlines file, blank lines skipped; a bad line is an error naming file and line."""
    path = Path(path)
    records = []
    with path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise JsonLinesError(f"{path}:{line_number}: not valid JSON: {error}") from None
    return records


@contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """A fresh temporary folder beside ``path`` to fill; it replaces ``path`` when the block ends without error."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir(parents=True)
    try:
        yield temporary
        shutil.rmtree(path, ignore_errors=True)
        os.replace(temporary, path)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
