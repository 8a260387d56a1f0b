"""The CoNLL-2012 files' column layout, as the CoNLL-2012 scripts print a sentence.

Each column is right-aligned to its widest cell plus two spaces; a cell ending in ``*``, ``-`` or an ASCII
digit keeps one space after it; the cells of a row are joined by one space and the row stripped. Rows
of different lengths are laid out as the scripts lay them out: column ``c`` holds the ``c``-th cell of the
rows that have one, and row ``r`` gets back the ``r``-th cell of each column that has one.
"""

from __future__ import annotations

from collections.abc import Sequence

_SPACED = frozenset("*-0123456789")  # a cell ending in one of these keeps a space after it


def format_rows(rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of one sentence's rows (cells without whitespace), laid out as the scripts print them."""
    if not rows:
        return []
    width = len(rows[0])
    if all(len(row) == width for row in rows):
        columns = [_pad(column) for column in zip(*rows, strict=True)]
        return [" ".join(row).strip() for row in zip(*columns, strict=True)]
    columns = []
    for row in rows:
        for index, cell in enumerate(row):
            if index == len(columns):
                columns.append([])
            columns[index].append(cell)
    padded = [_pad(column) for column in columns]
    return [" ".join(column[index] for column in padded if index < len(column)).strip() for index in range(len(rows))]


def _pad(column: Sequence[str]) -> list[str]:
    width = max(map(len, column)) + 2
    return [(cell + " " if cell[-1:] in _SPACED else cell).rjust(width) for cell in column]
