"""The text of the release's and the skeletons' files, and the one error of the OntoNotes conversion."""

from __future__ import annotations

from coref_pipeline.errors import UserError


class OntonotesError(UserError, ValueError):
    """An OntoNotes source that cannot be converted; the message names the file (and line, document, sentence)."""


def decode(data: bytes, source: str) -> str:
    """``data`` as UTF-8 text (the CoNLL-2012 scripts read every file as UTF-8); else an error naming the line."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise OntonotesError(f"{source}:{line}: not a UTF-8 text file") from None


def line_of(text: str, offset: int) -> int:
    """The 1-based line of ``text`` at character ``offset``."""
    return text.count("\n", 0, offset) + 1
