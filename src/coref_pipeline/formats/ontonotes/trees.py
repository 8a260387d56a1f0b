"""The words of an OntoNotes ``.parse`` file, as the CoNLL-2012 scripts fill a skeleton's word column.

``skeleton2conll.py`` (CoNLL-2012 scripts v3, run with ``-edited --text`` for English and ``--text`` for
the other languages) reads the file's trees in order and takes, for each tree, the words of its leaves:

- lines that start with ``;``, ``<`` or ``*`` are comments and skipped;
- a tree runs from an opening parenthesis at depth 0 to its matching closing one;
- with ``-edited`` (English), subtrees labelled ``EDITED`` (disfluencies) are removed first; a tree left
  with no leaf at all becomes the one word ``nullp``;
- leaves tagged ``-NONE-`` (traces, empty categories) are skipped; a tree whose leaves are all traces
  gives one empty word.

The words keep the release's escapes (``-LRB-``, ``-RRB-``, ``-LCB-``...). Trees are read as the scripts'
s-expression reader reads them; a malformed one (unbalanced parentheses, text between trees, a node with
two words or an unlabelled node) is an :class:`OntonotesError` naming the file and line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from coref_pipeline.formats.ontonotes.text import OntonotesError, line_of

EDITED = "EDITED"
TRACE = "-NONE-"
NULL_TREE_WORD = "nullp"  # what skeleton2conll.py writes for a tree that -edited empties

_COMMENT_LINE = re.compile(r"^[;<*].*\n", re.MULTILINE)
_LEAF = re.compile(r"\(\s*([^\s()]+)\s+([^\s()]+)\s*\)")
_ATOM = re.compile(r"[^\s()]+")
_TOKEN = re.compile(r"\(|\)|[^\s()]+")


@dataclass(frozen=True)
class ParseTrees:
    """The words of each tree of one ``.parse`` file, and where each tree starts (for messages)."""

    source: str
    words: list[list[str]]
    starts: list[int]  # the 1-based line of each tree

    def __len__(self) -> int:
        return len(self.words)


def read_parse_trees(text: str, source: str, remove_edited: bool) -> ParseTrees:
    """The words of every tree of a ``.parse`` file's ``text`` (see the module's rules)."""
    if _COMMENT_LINE.search(text):
        text = _COMMENT_LINE.sub("", text)
    spans, lines = _tree_spans(text, source)
    words = [
        tree_words(text[start:end], remove_edited, source, line)
        for (start, end), line in zip(spans, lines, strict=True)
    ]
    return ParseTrees(source, words, lines)


def _tree_spans(text: str, source: str) -> tuple[list[tuple[int, int]], list[int]]:
    """``(start, end)`` of each tree (from a ``(`` at depth 0 to its matching ``)``; only blanks between trees)
    and the 1-based line where each starts."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)  # [num_chars] one code point each
    positions = np.flatnonzero((codes == ord("(")) | (codes == ord(")")))  # [num_parens]
    steps = np.where(codes[positions] == ord("("), 1, -1)  # [num_parens]
    depth = np.cumsum(steps)  # [num_parens] the depth after each parenthesis
    if depth.size and depth.min() < 0:
        where = int(positions[int(np.argmax(depth < 0))])
        raise OntonotesError(f"{source}:{line_of(text, where)}: a ')' that closes no tree")
    if depth.size and depth[-1] != 0:
        opened = positions[np.flatnonzero((depth == 1) & (steps == 1))[-1]]
        raise OntonotesError(f"{source}:{line_of(text, int(opened))}: a tree that is never closed")
    starts = positions[(steps == 1) & (depth == 1)].tolist()
    ends = (positions[(steps == -1) & (depth == 0)] + 1).tolist()
    previous = 0
    for start, end in zip(starts, ends, strict=True):
        if text[previous:start].strip():
            offset = previous + len(text[previous:start]) - len(text[previous:start].lstrip())
            raise OntonotesError(f"{source}:{line_of(text, offset)}: text outside a tree")
        previous = end
    if text[previous:].strip():
        offset = previous + len(text[previous:]) - len(text[previous:].lstrip())
        raise OntonotesError(f"{source}:{line_of(text, offset)}: text outside a tree")
    newlines = np.flatnonzero(codes == ord("\n"))  # [num_lines]
    lines = (np.searchsorted(newlines, starts) + 1).tolist()
    return list(zip(starts, ends, strict=True)), lines


def tree_words(tree: str, remove_edited: bool, source: str = "<tree>", line: int = 1) -> list[str]:
    """The words skeleton2conll.py takes from one tree (``(TOP (S (NP (PRP It)) ...))``)."""
    leaves = _LEAF.findall(tree)
    # Every node a label and every leaf one word: then the leaves are all the words (no EDITED to remove).
    plain = len(_ATOM.findall(tree)) == tree.count("(") + len(leaves)
    if not plain or (remove_edited and EDITED in tree):
        leaves = _leaves_outside_edited(tree, remove_edited, source, line)
    if not leaves:
        return [NULL_TREE_WORD] if remove_edited else [""]
    return [word for tag, word in leaves if tag != TRACE] or [""]


def _leaves_outside_edited(tree: str, remove_edited: bool, source: str, line: int) -> list[tuple[str, str]]:
    """``(tag, word)`` of the leaves that no EDITED subtree holds (all of them without ``remove_edited``)."""
    leaves: list[tuple[str, str]] = []
    stack: list[list] = []  # [label, word, children, is_edited] of each open node
    edited = 0  # open EDITED nodes

    def fail(what: str) -> OntonotesError:
        return OntonotesError(f"{source}:{line}: {what} in the tree starting {' '.join(tree[:50].split())!r}")

    for token in _TOKEN.findall(tree):
        if token == "(":
            if stack and stack[-1][0] is None:
                raise fail("a node without a label")
            if stack and stack[-1][1] is not None:
                raise fail(f"a subtree after the word {stack[-1][1]!r}")
            stack.append([None, None, 0, False])
        elif token == ")":
            label, word, children, is_edited = stack.pop()
            if label is None:
                if children:
                    raise fail("a node without a label")
                continue  # "()": the scripts' reader drops it
            if word is not None:
                if edited == 0:
                    leaves.append((label, word))
            if is_edited:
                edited -= 1
            if stack:
                stack[-1][2] += 1
        else:
            node = stack[-1]
            if node[2]:
                raise fail(f"the word {token!r} after a subtree")
            if node[0] is None:
                node[0] = token
                if remove_edited and token == EDITED:
                    node[3] = True
                    edited += 1
            elif node[1] is None:
                node[1] = token
            else:
                raise fail(f"a node with more than one word ({node[1]!r}, {token!r})")
    return leaves
