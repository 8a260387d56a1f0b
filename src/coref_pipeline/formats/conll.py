"""CoNLL-2012 reading and writing.

The reader accepts the OntoNotes 5.0 ``*_gold_conll`` layout and any corpus in
that layout: whitespace-separated columns (the coreference column is always the
last), ``#begin document (NAME); part NNN`` / ``#end document`` headers, a blank
line between sentences, several documents and parts per file.

Word-level clusters are lists of inclusive ``(first_word, last_word)`` spans,
with word indices counted over the whole document (part). Their order follows
the original ``minimize.py``: a cluster appears when its first mention is
completed, and its mentions are listed in the order they are completed.

Errors name the file, the line and what is wrong (:class:`ConllFormatError`).
"""

from __future__ import annotations

import gc
import gzip
import logging
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import compress
from operator import itemgetter, methodcaller
from pathlib import Path
from typing import Any

import numpy as np

from coref_pipeline.files import atomic_write_text
from coref_pipeline.formats.columns import NO_SPEAKER, ConllFormatError
from coref_pipeline.formats.conllu import conllu_to_conll2012, is_conllu

logger = logging.getLogger(__name__)

Span = tuple[int, int]
Cluster = list[Span]

BEGIN_DOCUMENT_RE = re.compile(r"#begin document \((.*)\); part (\d+)")
_BEGIN_ANY_RE = re.compile(r"^#\s*begin document (.*?)$")
_END_RE = re.compile(r"^#\s*end document")
_COREF_PIECE_RE = re.compile(r"\((\d+)\)|\((\d+)|(\d+)\)")

# OntoNotes 5.0 genres: a document's genre is the first two letters of its key.
GENRES = ("bc", "bn", "mz", "nw", "pt", "tc", "wb")
DEFAULT_GENRE = "nw"  # the genre of a key outside GENRES (and of raw text)

# How the reference scorer reads a file (the options of ``parse_conll_lines``): the coreference
# column only, brackets in its order, mentions may cross sentences, repeats kept for scoring to report.
SCORER_READING = {
    "min_columns": 1,
    "strict_mentions": False,
    "bracket_order": "reference",
    "allow_cross_sentence": True,
    "coref_only": True,
}


@dataclass
class ConllDocument:
    """One ``#begin document`` ... ``#end document`` block (one part)."""

    name: str
    part: int | None
    header: str
    source: str
    begin_line: int
    words: list[str] = field(default_factory=list)
    pos: list[str] = field(default_factory=list)
    speakers: list[str] = field(default_factory=list)
    sentence_ids: list[int] = field(default_factory=list)
    clusters: list[Cluster] = field(default_factory=list)

    @property
    def doc_key(self) -> str:
        """``"{name}_{int(part)}"`` as in ``minimize.py``; the bare name without a part."""
        return self.name if self.part is None else f"{self.name}_{self.part}"

    @property
    def num_sentences(self) -> int:
        return self.sentence_ids[-1] + 1 if self.sentence_ids else 0


@dataclass(frozen=True)
class ConllFile:
    """The text of a CoNLL-2012 file and the path it came from (for error messages)."""

    path: str
    text: str

    @classmethod
    def read(cls, path: str | Path) -> ConllFile:
        """The file's text (a UTF-8 byte-order mark is read as none, as CRLF line ends are read as LF);
        a missing or non-UTF-8 file is a :class:`ConllFormatError` naming it.

        A CoNLL-U file (``.conllu``, CorefUD coreference) is read as the CoNLL-2012 text of its documents
        (:mod:`coref_pipeline.formats.conllu`): every reader of CoNLL-2012 files reads it as they are read.
        A name ending in ``.gz`` is read through gzip (``train.conll.gz``, ``dev.conllu.gz``).
        """
        path = Path(path)
        if path.is_dir():
            raise ConllFormatError(str(path), None, "a directory, not a CoNLL file")
        if not path.is_file():
            raise ConllFormatError(str(path), None, "no such file")
        data = path.read_bytes()
        if is_gzip(path):
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError, zlib.error) as error:
                raise ConllFormatError(str(path), None, f"not a readable gzip file ({error})") from None
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            line = data.count(b"\n", 0, error.start) + 1
            raise ConllFormatError(str(path), line, "not a UTF-8 text file (a binary file?)") from None

        if is_conllu(path.with_suffix("") if is_gzip(path) else path):
            text = conllu_to_conll2012(text, str(path))
        return cls(str(path), text)


def is_gzip(path: str | Path) -> bool:
    """Whether ``path`` names a gzip-compressed file (by its suffix, as ``gzip`` names them)."""
    return Path(path).suffix.lower() == ".gz"


def genre_of(doc_key: str, genres: Sequence[str] = GENRES, default: str = DEFAULT_GENRE) -> str:
    """The genre of a document: the first two letters of its key if known, else ``default``."""
    prefix = doc_key[:2]
    return prefix if prefix in genres else default


def normalize_word(word: str) -> str:
    """``minimize.py``'s word normalisation: ``/.`` -> ``.`` and ``/?`` -> ``?``."""
    if word == "/." or word == "/?":
        return word[1:]
    return word


def parse_header(header: str) -> tuple[str, int | None]:
    """Document name and part from a ``#begin document`` line."""
    match = BEGIN_DOCUMENT_RE.match(header)
    if match:
        return match.group(1), int(match.group(2))
    any_match = _BEGIN_ANY_RE.match(header)
    name = any_match.group(1).strip() if any_match else header
    if name.startswith("(") and name.endswith(");"):
        name = name[1:-2]
    elif name.startswith("(") and name.endswith(")"):
        name = name[1:-1]
    return name, None


def parse_coref_column(value: str, bracket_order: str = "written") -> list[tuple[str, int]]:
    """Split a coreference cell into ``("open"|"close"|"single", cluster_id)`` events.

    Parts are separated by ``|``; a part may also hold several brackets run
    together (``(1(3``, ``3)1)``) as the reference scorer accepts.
    ``bracket_order="written"`` keeps the order of the cell (``minimize.py``);
    ``"reference"`` orders singles, then openings, then closings, as the
    reference scorer v8.01 does. Raises ``ValueError`` on anything else.
    """
    if value == "-" or value == "_":
        return []
    events: list[tuple[str, int]] = []
    for piece in value.split("|"):
        if piece[:1] == "(":
            if piece[-1:] == ")" and piece[1:-1].isdigit():
                events.append(("single", int(piece[1:-1])))
                continue
            if piece[1:].isdigit():
                events.append(("open", int(piece[1:])))
                continue
        elif piece[-1:] == ")" and piece[:-1].isdigit():
            events.append(("close", int(piece[:-1])))
            continue
        if not piece:
            raise ValueError(f"empty part in coreference annotation {value!r}")
        position = 0
        for match in _COREF_PIECE_RE.finditer(piece):
            if match.start() != position:
                break
            position = match.end()
            single, opening, closing = match.groups()
            if single is not None:
                events.append(("single", int(single)))
            elif opening is not None:
                events.append(("open", int(opening)))
            else:
                events.append(("close", int(closing)))
        if position != len(piece) or position == 0:
            raise ValueError(f"unknown coreference annotation {value!r}")
    if bracket_order == "reference":
        rank = {"single": 0, "open": 1, "close": 2}
        events.sort(key=lambda event: rank[event[0]])
    elif bracket_order != "written":
        raise ValueError(f"bracket_order must be 'written' or 'reference', not {bracket_order!r}")
    return events


def _coref_events(cell: str, bracket_order: str) -> list[tuple[str, int]]:
    """``parse_coref_column`` with a fast path for the common one-bracket cells (order-free)."""
    if "|" not in cell:
        if cell[0] == "(":
            if cell[-1] == ")":
                if cell[1:-1].isdigit():
                    return [("single", int(cell[1:-1]))]
            elif cell[1:].isdigit():
                return [("open", int(cell[1:]))]
        elif cell[-1] == ")" and cell[:-1].isdigit():
            return [("close", int(cell[:-1]))]
    return parse_coref_column(cell, bracket_order)


def merge_clusters(clusters: Iterable[Cluster]) -> list[Cluster]:
    """``minimize.py``'s merge: a cluster sharing a mention with an earlier one joins it.

    The result keeps insertion order (earlier cluster's mentions first, then the
    new ones), so ``set(cluster)`` reproduces the original's set construction.
    A cluster that shares mentions with two different earlier clusters cannot
    be merged this way (the original fails an assertion): ``ValueError``.
    """
    merged: list[Cluster] = []
    owner: dict[Span, int] = {}  # mention -> index in merged
    for cluster in clusters:
        targets = [owner[mention] for mention in cluster if mention in owner]
        if not targets:
            index = len(merged)
            merged.append(list(dict.fromkeys(cluster)))
            for mention in cluster:
                owner[mention] = index
            continue
        index = targets[0]
        if any(other != index for other in targets):
            shared = sorted(mention for mention in cluster if mention in owner)
            raise ValueError(f"mentions {shared} belong to clusters that cannot be merged")
        logger.warning("Merging clusters that share mentions: %s", sorted(m for m in cluster if m in owner))
        for mention in cluster:
            if mention not in owner:
                merged[index].append(mention)
                owner[mention] = index
    return merged


def _parse_document(
    source: str,
    header: str,
    begin_line: int,
    body: list[str],
    min_columns: int,
    bracket_order: str,
    allow_cross_sentence: bool,
    strict_mentions: bool,
    coref_only: bool = False,
) -> ConllDocument:
    """One document from its header and the lines between ``#begin`` and ``#end``."""
    header = header.rstrip("\r\n")
    name, part = parse_header(header)
    document = ConllDocument(name=name, part=part, header=header, source=source, begin_line=begin_line)
    doc_key = document.doc_key
    if coref_only:
        # Scoring needs the last column only: split each row once from the right.
        row_index = list(compress(range(len(body)), map(str.strip, body)))  # non-blank lines
        if not row_index:
            raise ConllFormatError(source, begin_line, f"empty document {doc_key!r}: no token rows")
        row_lines = [begin_line + 1 + i for i in row_index]
        cells = list(map(itemgetter(-1), map(methodcaller("rsplit", None, 1), map(body.__getitem__, row_index))))
        return _read_mentions(document, cells, row_lines, [], bracket_order, True, strict_mentions, source, begin_line)
    split_lines = [line.split() for line in body]
    is_row = np.fromiter(map(bool, split_lines), dtype=bool, count=len(split_lines))  # [num_lines]
    rows = list(compress(split_lines, is_row))
    if not rows:
        raise ConllFormatError(source, begin_line, f"empty document {doc_key!r}: no token rows")
    # Body line i is file line begin_line + 1 + i.
    row_lines = (np.flatnonzero(is_row) + begin_line + 1).tolist()
    if min(map(len, rows)) < min_columns:
        row = next(i for i, columns in enumerate(rows) if len(columns) < min_columns)
        raise ConllFormatError(
            source, row_lines[row], f"row has {len(rows[row])} columns, at least {min_columns} expected"
        )
    # A sentence ends at a blank line that follows a token row.
    sentence_break = ~is_row
    sentence_break[1:] &= is_row[:-1]
    sentence_break[0] = False
    document.sentence_ids = np.cumsum(sentence_break)[is_row].tolist()
    if min_columns > 9:
        words, pos, speakers, cells = zip(*map(itemgetter(3, 4, 9, -1), rows), strict=True)
        document.words, document.pos, document.speakers = list(words), list(pos), list(speakers)
    else:
        document.words = [c[3] if len(c) > 3 else c[0] for c in rows]
        document.pos = [c[4] if len(c) > 4 else "-" for c in rows]
        document.speakers = [c[9] if len(c) > 9 else NO_SPEAKER for c in rows]
        cells = [c[-1] for c in rows]
    sentence_ids = document.sentence_ids
    return _read_mentions(
        document,
        cells,
        row_lines,
        sentence_ids,
        bracket_order,
        allow_cross_sentence,
        strict_mentions,
        source,
        begin_line,
    )


def _read_mentions(
    document: ConllDocument,
    cells: Sequence[str],
    row_lines: list[int],
    sentence_ids: list[int],
    bracket_order: str,
    allow_cross_sentence: bool,
    strict_mentions: bool,
    source: str,
    begin_line: int,
) -> ConllDocument:
    """Fill ``document.clusters`` from the coreference cells of its rows."""
    doc_key = document.doc_key
    stacks: dict[int, list[int]] = {}  # cluster id -> open start words
    raw_clusters: dict[int, Cluster] = {}
    first_seen: dict[int, None] = {}  # cluster ids in the order their first bracket is read
    seen: dict[tuple[int, Span], int] = {}  # (cluster id, span) -> row
    for word in compress(range(len(cells)), map("-".__ne__, cells)):
        cell = cells[word]
        try:
            events = _coref_events(cell, bracket_order)
        except ValueError as error:
            raise ConllFormatError(source, row_lines[word], str(error)) from None
        for kind, cluster_id in events:
            first_seen.setdefault(cluster_id)
            if kind == "open":
                stacks.setdefault(cluster_id, []).append(word)
                continue
            if kind == "single":
                start = word
            else:
                stack = stacks.get(cluster_id)
                if not stack:
                    raise ConllFormatError(
                        source,
                        row_lines[word],
                        f"unbalanced coreference brackets: '{cluster_id})' closes a mention of cluster "
                        f"{cluster_id} that was never opened",
                    )
                start = stack.pop()
                if not allow_cross_sentence and sentence_ids[start] != sentence_ids[word]:
                    raise ConllFormatError(
                        source,
                        row_lines[start],
                        f"unbalanced coreference brackets: '({cluster_id}' opened here is not closed by the end "
                        f"of its sentence (it closes on line {row_lines[word]})",
                    )
            span = (start, word)
            if strict_mentions:
                previous = seen.get((cluster_id, span))
                if previous is not None:
                    raise ConllFormatError(
                        source,
                        row_lines[word],
                        f"repeated mention: words {start}-{word} of document {doc_key!r} are annotated twice "
                        f"in cluster {cluster_id} (first on line {row_lines[previous]})",
                    )
                seen[(cluster_id, span)] = word
            raw_clusters.setdefault(cluster_id, []).append(span)
    for cluster_id, stack in stacks.items():
        if stack:
            # The same words whatever the reading (a bracket closed in a later sentence was reported above).
            raise ConllFormatError(
                source,
                row_lines[stack[-1]],
                f"unbalanced coreference brackets: '({cluster_id}' opened here is never closed (no '{cluster_id})' "
                f"before '#end document')",
            )
    if not strict_mentions:
        # As the reference scorer numbers entities: by the first bracket read.
        document.clusters = [raw_clusters[cluster_id] for cluster_id in first_seen if cluster_id in raw_clusters]
        return document
    try:
        document.clusters = merge_clusters(raw_clusters.values())
    except ValueError as error:
        raise ConllFormatError(source, begin_line, f"document {doc_key!r}: {error}") from None
    return document


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many small lists.

    Reading a corpus allocates millions of short-lived lists that form no
    cycles; the collector's repeated passes over them cost a third of the time.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def parse_conll_lines(
    lines: Iterable[str],
    source: str = "<string>",
    *,
    min_columns: int = 12,
    skip_bad_documents: bool = False,
    bracket_order: str = "written",
    allow_cross_sentence: bool = False,
    strict_mentions: bool = True,
    coref_only: bool = False,
    errors: list[ConllFormatError] | None = None,
) -> list[ConllDocument]:
    """Parse CoNLL-2012 lines into documents.

    With ``skip_bad_documents`` a document with an error is reported (logged and
    appended to ``errors``) and left out; every other document is unchanged.
    ``strict_mentions=False`` (for scoring) keeps clusters as annotated: no
    merging of clusters that share a mention, no error on repeated mentions,
    clusters listed in the order of their first bracket (as the reference
    scorer numbers entities; with ``strict_mentions`` they follow ``minimize.py``).
    ``bracket_order="reference"`` reads brackets as the reference scorer does.
    ``coref_only`` reads the coreference column and nothing else (no words,
    sentences, speakers; for scoring; implies ``allow_cross_sentence``).
    """
    with paused_gc():
        return _parse_conll_lines(
            lines if isinstance(lines, list) else list(lines),
            source,
            min_columns,
            skip_bad_documents,
            bracket_order,
            allow_cross_sentence,
            strict_mentions,
            coref_only,
            errors,
        )


def _parse_conll_lines(
    lines: list[str],
    source: str,
    min_columns: int,
    skip_bad_documents: bool,
    bracket_order: str,
    allow_cross_sentence: bool,
    strict_mentions: bool,
    coref_only: bool,
    errors: list[ConllFormatError] | None,
) -> list[ConllDocument]:
    documents: list[ConllDocument] = []

    def fail(error: ConllFormatError) -> None:
        if not skip_bad_documents:
            raise error
        logger.warning("Skipping bad document: %s", error)
        if errors is not None:
            errors.append(error)

    begin: int | None = None  # index of the open document's header line
    outside_start = 0  # first line index after the last closed document
    for index in list(compress(range(len(lines)), map(methodcaller("startswith", "#"), lines))):
        line = lines[index] = lines[index].rstrip("\r\n")
        if _BEGIN_ANY_RE.match(line):
            if begin is not None:
                fail(
                    ConllFormatError(
                        source,
                        begin + 1,
                        f"document {_key_of(lines[begin])!r} has no '#end document' before the next "
                        f"'#begin document' on line {index + 1}",
                    )
                )
            else:
                _check_outside(lines, outside_start, index, source, fail)
            begin = index
        elif _END_RE.match(line):
            if begin is None:
                fail(ConllFormatError(source, index + 1, "'#end document' without '#begin document'"))
                outside_start = index + 1
                continue
            try:
                documents.append(
                    _parse_document(
                        source,
                        lines[begin],
                        begin + 1,
                        lines[begin + 1 : index],
                        min_columns,
                        bracket_order,
                        allow_cross_sentence,
                        strict_mentions,
                        coref_only,
                    )
                )
            except ConllFormatError as error:
                fail(error)
            begin = None
            outside_start = index + 1
    if begin is not None:
        fail(
            ConllFormatError(
                source,
                begin + 1,
                f"document {_key_of(lines[begin])!r} has no '#end document' (file ends at line {len(lines)})",
            )
        )
    else:
        _check_outside(lines, outside_start, len(lines), source, fail)
    return documents


def _key_of(header: str) -> str:
    name, part = parse_header(header)
    return name if part is None else f"{name}_{part}"


def _check_outside(lines: list[str], start: int, stop: int, source: str, fail) -> None:
    """Report a token row found between documents."""
    for index in range(start, stop):
        if lines[index].strip() and not lines[index].startswith("#"):
            fail(ConllFormatError(source, index + 1, "token row outside a '#begin document' ... '#end document' block"))
            return


def read_conll(path: str | Path, **options: Any) -> list[ConllDocument]:
    """Read every document (part) of a CoNLL-2012 file; ``options`` as for :func:`parse_conll_lines`."""
    conll_file = ConllFile.read(path)
    return parse_conll_lines(conll_file.text.splitlines(), conll_file.path, **options)


def format_coref_cells(clusters: Sequence[Sequence[Span]], num_words: int) -> list[str]:
    """The coreference column for each word of a document, as ``minimize.py`` writes it.

    Per word: closings (innermost first), one-word mentions, then openings
    (outermost first); duplicate spans are dropped (first cluster wins) with a
    warning, so the reference scorer never sees a repeated mention.
    """
    closings: dict[int, list[tuple[int, int]]] = {}
    singles: dict[int, list[int]] = {}
    openings: dict[int, list[tuple[int, int]]] = {}
    seen: set[Span] = set()
    for cluster_id, cluster in enumerate(clusters):
        for start, end in cluster:
            start, end = int(start), int(end)
            if not 0 <= start <= end < num_words:
                raise ValueError(f"mention {[start, end]} is outside the document's {num_words} words")
            if (start, end) in seen:
                logger.warning("Dropping duplicate mention %s (cluster %d)", [start, end], cluster_id)
                continue
            seen.add((start, end))
            if start == end:
                singles.setdefault(start, []).append(cluster_id)
            else:
                openings.setdefault(start, []).append((end, cluster_id))
                closings.setdefault(end, []).append((start, cluster_id))
    cells = []
    for word in range(num_words):
        parts = [f"{cid})" for _, cid in sorted(closings.get(word, ()), reverse=True)]
        parts += [f"({cid})" for cid in singles.get(word, ())]
        parts += [f"({cid}" for _, cid in sorted(openings.get(word, ()), reverse=True)]
        cells.append("|".join(parts) if parts else "-")
    return cells


def write_conll_response(
    gold_path: str | Path,
    clusters_by_doc: Mapping[str, Sequence[Sequence[Span]]],
    output_path: str | Path,
) -> None:
    """Write predicted word-level clusters into a copy of a gold file's layout (atomically).

    See :func:`format_conll_response`.
    """
    gold_path = Path(gold_path)
    text = format_conll_response(ConllFile.read(gold_path).text, clusters_by_doc, str(gold_path))
    atomic_write_text(output_path, text)


def format_conll_response(
    gold_text: str, clusters_by_doc: Mapping[str, Sequence[Sequence[Span]]], source: str = "<gold>"
) -> str:
    """Predicted word-level clusters in a copy of a gold file's layout.

    Token rows are tab-separated with the last column replaced; ``#begin`` /
    ``#end`` lines are copied byte for byte. ``clusters_by_doc`` is keyed by
    ``doc_key``; every gold document needs an entry and no other key may appear.
    """
    raw_lines = gold_text.splitlines(keepends=True)
    documents = parse_conll_lines(gold_text.splitlines(), source, min_columns=1, allow_cross_sentence=True)
    known = {document.doc_key for document in documents}
    unknown = sorted(set(clusters_by_doc) - known)
    if unknown:
        raise KeyError(f"predictions for documents not in {source}: {unknown[:5]}")
    cells_by_doc = {}
    for document in documents:
        if document.doc_key not in clusters_by_doc:
            raise KeyError(f"no predicted clusters for document {document.doc_key!r} of {source}")
        try:
            cells_by_doc[document.doc_key] = format_coref_cells(clusters_by_doc[document.doc_key], len(document.words))
        except ValueError as error:
            raise ValueError(f"document {document.doc_key!r}: {error}") from None

    output_lines = []
    cells: list[str] = []
    word_index = 0
    for raw_line in raw_lines:
        line = raw_line.rstrip("\r\n")
        if line.startswith("#") and _BEGIN_ANY_RE.match(line):
            cells = cells_by_doc[_key_of(line)]
            word_index = 0
            output_lines.append(raw_line)
            continue
        if line.startswith("#"):
            output_lines.append(raw_line)
            continue
        columns = line.split()
        if not columns:
            output_lines.append("\n")
            continue
        columns[-1] = cells[word_index]
        word_index += 1
        output_lines.append("\t".join(columns) + "\n")
    return "".join(output_lines)


def document_stats(documents: Sequence[ConllDocument]) -> dict[str, object]:
    """Corpus counts: documents, sentences, words, mentions, entities, singletons, longest document."""
    longest = max(documents, key=lambda document: len(document.words), default=None)
    return {
        "documents": len(documents),
        "sentences": sum(document.num_sentences for document in documents),
        "words": sum(len(document.words) for document in documents),
        "mentions": sum(len(cluster) for document in documents for cluster in document.clusters),
        "entities": sum(len(document.clusters) for document in documents),
        "singletons": sum(1 for document in documents for cluster in document.clusters if len(cluster) == 1),
        "longest_document": longest.doc_key if longest else None,
        "longest_document_words": len(longest.words) if longest else 0,
    }


def format_conll_document(
    doc_key: str,
    sentences: Sequence[Sequence[str]],
    clusters: Sequence[Sequence[Span]],
    speakers: Sequence[str] | None = None,
) -> str:
    """One document in the CoNLL-2012 layout (12 columns), from words and word-level clusters.

    A key ``NAME_N`` (as ``minimize.py`` builds them) is written as document NAME,
    part N, so reading the file gives the same key; any other key is part 0.
    Columns: document name, part, word number, word, then ``-`` for POS, parse,
    lemma, frameset, sense, the word's speaker (``-`` if unknown), ``*`` for named
    entities, and the coreference column. ``read_conll`` and the reference scorer read it.
    """
    match = re.fullmatch(r"(.+)_(\d+)", doc_key)
    name, part = (match.group(1), int(match.group(2))) if match else (doc_key, 0)
    if not name or any(ch.isspace() for ch in name):
        raise ValueError(f"document key {doc_key!r}: a CoNLL document name has no whitespace")
    num_words = sum(len(sentence) for sentence in sentences)
    cells = format_coref_cells(clusters, num_words)
    if speakers is not None and len(speakers) != num_words:
        raise ValueError(f"document {doc_key!r}: {len(speakers)} speakers for {num_words} words")
    lines = [f"#begin document ({name}); part {part:03d}"]
    word = 0
    for sentence in sentences:
        for number, token in enumerate(sentence):
            if not token or any(ch.isspace() for ch in token):
                raise ValueError(f"document {doc_key!r}: word {word} is {token!r}; CoNLL words have no whitespace")
            speaker = "_".join(speakers[word].split()) if speakers is not None else ""
            speaker = speaker or NO_SPEAKER
            lines.append(
                "\t".join([name, str(part), str(number), token, "-", "-", "-", "-", "-", speaker, "*", cells[word]])
            )
            word += 1
        lines.append("")
    lines.append("#end document")
    return "\n".join(lines) + "\n"
