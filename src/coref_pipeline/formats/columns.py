"""What the CoNLL-style formats share (CoNLL-2012 and CoNLL-U): the speaker column's "no speaker" and the error
a file that cannot be read raises, naming its file and line.

A module of its own so that ``conll.py``, which reads CoNLL-U files through ``conllu.py``, and ``conllu.py``,
which writes CoNLL-2012 text, both take these from below them.
"""

from __future__ import annotations

from coref_pipeline.errors import UserError

NO_SPEAKER = "-"  # the speaker column's "no speaker"


class ConllFormatError(UserError, ValueError):
    """A CoNLL-2012 (or CoNLL-U) file that cannot be read; the message names file and line."""

    def __init__(self, source: str, line: int | None, message: str) -> None:
        self.source = source
        self.line = line
        self.reason = message
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {message}")
