"""The input files of ``coref-pipeline predict``: plain text, text/sentence records, Joshi jsonlines."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any

from coref_pipeline.errors import UserError
from coref_pipeline.formats.segmentation import check_field_lengths

# What ``predict`` takes: raw text, a list of words, or a list of sentences (lists of words).
DocumentInput = str | Sequence[str] | Sequence[Sequence[str]]
# Speakers: one for the whole document, one per sentence, or one per word (nested as the sentences).
SpeakersInput = str | Sequence[str] | Sequence[Sequence[str]] | None


JSONLINES_SUFFIXES = (".jsonl", ".jsonlines", ".json")
JOSHI_KEYS = ("doc_key", "sentences", "speakers", "sentence_map", "subtoken_map")


def record_content(record: Mapping[str, Any], where: str) -> tuple[DocumentInput, dict[str, Any]]:
    """The document and the options (``speakers``, ``genre``, ``doc_key``) of an input record."""
    kinds = [key for key in ("text", "sentences", "words") if key in record]
    if len(kinds) != 1:
        raise ValueError(f"{where}: a record needs exactly one of 'text', 'sentences', 'words'; has {sorted(record)}")
    known = {kinds[0], "speakers", "genre", "doc_key"}
    unknown = sorted(set(record) - known)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; a record has {sorted(known)}")
    content = record[kinds[0]]
    if kinds[0] == "text" and not isinstance(content, str):
        raise ValueError(f"{where}: 'text' must be a string, got {type(content).__name__}")
    if kinds[0] == "sentences" and (not isinstance(content, list) or not all(isinstance(s, list) for s in content)):
        raise ValueError(f"{where}: 'sentences' must be a list of lists of words")
    if kinds[0] == "words" and (not isinstance(content, list) or not all(isinstance(w, str) for w in content)):
        raise ValueError(f"{where}: 'words' must be a list of strings")
    return content, {key: record[key] for key in ("speakers", "genre", "doc_key") if key in record}


class InputFormatError(UserError, ValueError):
    """An input file or record that ``predict`` cannot read; the message names the file and line."""


@dataclass
class PredictInputs:
    """The documents of one input file, checked as a whole when it is read and read again as they are predicted
    (:meth:`records`), so that no more than a few of them are in memory at once: raw records for ``predict``, or
    Joshi-format documents."""

    kind: str  # "raw" or "jsonlines"
    count: int  # how many documents
    read: Callable[[], Iterator[dict[str, Any]]]  # the documents, read from the file again
    without_tokens: list[str] = field(default_factory=list)  # Joshi-format documents without their words: 3 keys

    def records(self, start: int = 0) -> Iterator[dict[str, Any]]:
        """The documents from the ``start``-th on, in their order."""
        return islice(self.read(), start, None)


def read_predict_inputs(path: str | Path) -> PredictInputs:
    """Check a ``.txt`` file (one document), a folder of them, or a ``.jsonl`` / ``.jsonlines`` file, and count its
    documents; a fault is an :class:`InputFormatError` naming the file and line (a ``UnicodeDecodeError`` for a file
    that is not UTF-8).

    A folder's ``*.txt`` files are its documents, in the order of their names, each named by its file's stem. A
    jsonlines file holds either records ``{"text": ...}`` / ``{"sentences": [[...]]}``
    (optional ``speakers``, ``genre``, ``doc_key``; a record without ``doc_key`` is named
    ``<file stem>/<line>``) or Joshi-format documents (with ``subtoken_map`` and
    ``sentence_map``), not both.
    """
    path = Path(path)
    if path.is_dir():
        texts = sorted(path.glob("*.txt"))
        if not texts:
            raise InputFormatError(f"{path}: a folder without .txt files (each .txt file is one document)")
        for text in texts:  # each is UTF-8 text, checked before the model is loaded
            text.read_text(encoding="utf-8-sig")
        return PredictInputs("raw", len(texts), partial(_text_files, texts))
    if not path.is_file():
        raise InputFormatError(f"{path}: no such file or folder")
    if path.suffix == ".txt":
        path.read_text(encoding="utf-8-sig")
        return PredictInputs("raw", 1, partial(_text_files, [path]))
    if path.suffix not in JSONLINES_SUFFIXES:
        raise InputFormatError(f"{path}: expected a .txt file or jsonlines ({', '.join(JSONLINES_SUFFIXES)})")
    kinds: set[str] = set()
    count = 0
    without_tokens: list[str] = []
    for line_number, record in _jsonl_objects(path):
        where = f"{path}:{line_number}"
        if "subtoken_map" in record or "sentence_map" in record:
            missing = [key for key in JOSHI_KEYS if key not in record]
            if missing:
                raise InputFormatError(f"{where}: a Joshi-format document without {missing}")
            check_field_lengths(record, where)
            kinds.add("jsonlines")
            if "tokens" not in record and len(without_tokens) < 3:
                without_tokens.append(record["doc_key"])
        else:
            try:
                record_content(record, where)
            except ValueError as error:
                raise InputFormatError(str(error)) from None
            kinds.add("raw")
        if len(kinds) > 1:
            raise InputFormatError(f"{where}: the file mixes Joshi-format documents and text/sentence records")
        count += 1
    kind = kinds.pop() if kinds else "raw"
    return PredictInputs(kind, count, partial(_jsonl_documents, path, kind == "raw"), without_tokens)


def _jsonl_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each JSON object of a jsonlines file with its line number, blank lines skipped; a line that is not one is an
    :class:`InputFormatError` naming the file and line."""
    with path.open(encoding="utf-8-sig") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{line_number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise InputFormatError(f"{where}: not valid JSON: {error}") from None
            if not isinstance(record, dict):
                raise InputFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
            yield line_number, record


def _jsonl_documents(path: Path, raw: bool) -> Iterator[dict[str, Any]]:
    """The documents of a checked jsonlines file; a text record without ``doc_key`` named ``<file stem>/<line>``."""
    for line_number, record in _jsonl_objects(path):
        yield {"doc_key": f"{path.stem}/{line_number}", **record} if raw else record


def _text_files(paths: Sequence[Path]) -> Iterator[dict[str, Any]]:
    """One raw record a ``.txt`` file, named by its stem."""
    for path in paths:
        yield {"text": path.read_text(encoding="utf-8-sig"), "doc_key": path.stem}
