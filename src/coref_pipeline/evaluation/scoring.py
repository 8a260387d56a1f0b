"""Corpus scoring: key and response documents -> pooled coreference scores.

Documents are matched by ``doc_key``. Each side's clusters are cleaned first:
a mention (span) listed more than once keeps its first occurrence and the rest
are dropped with a warning; clusters left empty are dropped. The reference
scorer v8.01 drops repeated response mentions the same way but refuses to score
a response with more than 10 of them; we say what is wrong and score the rest.
Corpus scores pool counts over documents as the reference does.
"""

from __future__ import annotations

import codecs
import logging
import mmap
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from coref_pipeline.evaluation.metrics import (
    CONLL_METRICS,
    METRIC_NAMES,
    METRICS,
    Cluster,
    Counts,
    MetricCounts,
    Span,
    cluster_overlap,
    mention_identification,
    sum_in_order,
)
from coref_pipeline.formats.conll import SCORER_READING, parse_coref_column, parse_header, paused_gc, read_conll
from coref_pipeline.formats.conllu import is_conllu

logger = logging.getLogger(__name__)

DEFAULT_METRICS: tuple[str, ...] = CONLL_METRICS
REFERENCE_REPEATED_MENTION_LIMIT = 10

ClustersByDoc = Mapping[str, Sequence[Sequence[Span]]]


def conll_f1(metrics: Mapping[str, MetricCounts]) -> float | None:
    """Mean of the MUC, B³ and CEAF-e F1; ``None`` unless all three were computed."""
    if not all(name in metrics for name in CONLL_METRICS):
        return None
    return sum_in_order(metrics[name].f1 for name in CONLL_METRICS) / len(CONLL_METRICS)


@dataclass(frozen=True)
class DocumentScores:
    """One document's counts per metric and its mention identification counts."""

    doc_key: str
    metrics: dict[str, MetricCounts]
    mentions: Counts

    def __getitem__(self, metric: str) -> MetricCounts:
        return self.metrics[metric]

    @property
    def conll_f1(self) -> float | None:
        return conll_f1(self.metrics)

    def to_dict(self) -> dict[str, object]:
        return {
            "metrics": {name: counts.to_dict() for name, counts in self.metrics.items()},
            "mentions": self.mentions.to_dict(),
            "conll_f1": self.conll_f1,
        }


@dataclass(frozen=True)
class CorpusScores:
    """Counts pooled over documents (summed, then R/P/F1), with the per-document scores."""

    metrics: dict[str, MetricCounts]
    mentions: Counts
    documents: list[DocumentScores] = field(default_factory=list)

    def __getitem__(self, metric: str) -> MetricCounts:
        return self.metrics[metric]

    @property
    def conll_f1(self) -> float | None:
        return conll_f1(self.metrics)

    def document(self, doc_key: str) -> DocumentScores:
        for document in self.documents:
            if document.doc_key == doc_key:
                return document
        raise KeyError(doc_key)

    def to_dict(self, per_document: bool = False) -> dict[str, object]:
        result: dict[str, object] = {
            "metrics": {name: counts.to_dict() for name, counts in self.metrics.items()},
            "mentions": self.mentions.to_dict(),
            "conll_f1": self.conll_f1,
            "num_documents": len(self.documents),
        }
        if per_document:
            result["documents"] = {document.doc_key: document.to_dict() for document in self.documents}
        return result


def pool(documents: Sequence[DocumentScores], metrics: Sequence[str] | None = None) -> CorpusScores:
    """Pool documents' counts (sum numerators and denominators per metric)."""
    if metrics is None:
        metrics = list(documents[0].metrics) if documents else []
    pooled: dict[str, MetricCounts] = {}
    for name in metrics:
        counts = [document.metrics[name] for document in documents]
        pooled[name] = sum(counts[1:], counts[0]) if counts else _empty_counts(name)
    mentions = sum((document.mentions for document in documents), Counts(0, 0, 0, 0))
    return CorpusScores(pooled, mentions, list(documents))


def _empty_counts(metric: str) -> MetricCounts:
    return METRICS[metric](cluster_overlap([], []))


def check_metrics(metrics: Iterable[str]) -> tuple[str, ...]:
    """Validate metric names (order kept, repeats dropped)."""
    names = tuple(dict.fromkeys(metrics))
    unknown = [name for name in names if name not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {', '.join(unknown)}; choose from {', '.join(METRIC_NAMES)}")
    return names


def deduplicate_mentions(clusters: Sequence[Sequence[Span]], doc_key: str, side: str = "response") -> list[Cluster]:
    """Keep each span's first occurrence (in cluster order), drop repeats and empty clusters.

    Each dropped repeat is logged as a warning naming the document and the span.
    Spans given as lists (e.g. from JSON) become ``(int, int)`` tuples.
    """
    try:  # fast path: hashable spans, no repeats, no empty cluster
        mentions = set(chain.from_iterable(clusters))
        if len(mentions) == sum(map(len, clusters)) and all(clusters):
            return [list(cluster) for cluster in clusters]
    except TypeError:  # spans given as lists
        pass
    cluster_of: dict[Span, int] = {}
    cleaned: list[Cluster] = []
    for cluster_index, cluster in enumerate(clusters):
        kept: list[Span] = []
        for raw_span in cluster:
            span = (int(raw_span[0]), int(raw_span[1]))
            first = cluster_of.get(span)
            if first is not None:
                logger.warning(
                    "Document %r (%s): dropping repeated mention %s, already in %s cluster (first occurrence kept)",
                    doc_key,
                    side,
                    span,
                    "the same" if first == cluster_index else "an earlier",
                )
                continue
            cluster_of[span] = cluster_index
            kept.append(span)
        if kept:
            cleaned.append(kept)
    return cleaned


def remove_singleton_clusters(clusters: Sequence[Cluster]) -> list[Cluster]:
    """Drop clusters of one mention."""
    return [cluster for cluster in clusters if len(cluster) > 1]


def read_clusters(path: str | Path) -> dict[str, list[Cluster]]:
    """Word-level clusters of every document of a CoNLL-2012 file, by ``doc_key``, in reference order.

    Raises ``coref_pipeline.formats.conll.ConllFormatError`` (a missing or non-UTF-8 file
    included), or ``ValueError`` if a ``doc_key`` appears twice.

    A well-formed file is read by a fast path that looks at the coreference
    column only where it holds brackets; anything unusual (an error, comment
    lines, other line breaks than ``\\n``) goes to ``read_conll``, which gives the
    same clusters or the error naming the file and line.
    """
    fast = None if is_conllu(path) else _read_clusters_fast(path)  # CoNLL-U is read as its CoNLL-2012 text
    if fast is not None:
        return fast
    documents = read_conll(path, **SCORER_READING)
    clusters_by_doc: dict[str, list[Cluster]] = {}
    for document in documents:
        if document.doc_key in clusters_by_doc:
            raise ValueError(f"{path}: document {document.doc_key!r} appears more than once")
        # read_conll lists clusters as the reference scorer numbers them (first bracket first),
        # which decides which copy of a repeated mention is kept.
        clusters_by_doc[document.doc_key] = [cluster for cluster in document.clusters if cluster]
    return clusters_by_doc


# The fast path of ``read_clusters``. It reads the bytes: numpy finds the lines, the
# rows whose coreference cell is "-" are only counted, the common cells "(N)", "(N"
# and "N)" are parsed in arrays, the rest one by one, and the brackets are paired in
# arrays. It returns None for anything ``read_conll`` would report or read otherwise.

# Besides "\n", what ``str.splitlines`` (and so ``read_conll``) splits lines on.
_ASCII_LINE_BREAKS = (b"\r", b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e")
_UNICODE_LINE_BREAKS = ("\x85", "\u2028", "\u2029")
# A cell made of these bytes is the same token whether a line is split as bytes or as
# text (none of them is whitespace in either sense).
_PLAIN_CELL_BYTES = frozenset(b"0123456789()|-_")
_SINGLE, _OPEN, _CLOSE = 0, 1, 2
_EVENT_CODES = {"single": _SINGLE, "open": _OPEN, "close": _CLOSE}
_TAB, _NEWLINE, _SPACE = 9, 10, 32
_WINDOW = 8  # bytes at the end of a line where a simple cell is looked for (cluster ids up to 99999)
_SCAN_BLOCK = 1 << 18
_SAFE_KEY = 2**62  # sort keys built from cluster ids stay below this (int64)
_PLACES = 10 ** np.arange(_WINDOW - 1, -1, -1, dtype=np.int64)  # [W] a digit's place value, number at the end
_PLACES_BEFORE_LAST = np.append(_PLACES[1:], 0)  # [W] ... number before the last byte


class _NotFast(Exception):
    """The file needs ``read_conll`` (an error to report, or a layout the fast path does not read)."""


def _read_clusters_fast(path: str | Path) -> dict[str, list[Cluster]] | None:
    """``read_clusters`` of a well-formed file, or None when ``read_conll`` must read it.

    None for a missing or non-UTF-8 file, other line breaks than ``\\n``, ``#``
    lines other than ``#begin document ...`` and ``#end document`` in turn,
    text outside a document, an empty document, a malformed or unbalanced
    bracket: ``read_conll`` reports each of them.
    """
    try:
        with open(path, "rb") as handle:
            if os.fstat(handle.fileno()).st_size == 0:
                return {}
            # Mapped, not copied. Never closed explicitly: numpy arrays may still view it (in a
            # traceback, say); it is unmapped when the last of them goes.
            data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    try:
        with paused_gc():  # many small tuples and lists, no cycles
            return _parse_clusters(data)
    except _NotFast:
        return None


def _parse_clusters(data: bytes | mmap.mmap) -> dict[str, list[Cluster]]:
    if any(data.find(line_break) >= 0 for line_break in _ASCII_LINE_BREAKS) or data[:3] == codecs.BOM_UTF8:
        raise _NotFast  # read_conll reads other line breaks and a byte-order mark
    if not len(data):
        return {}
    buffer = np.frombuffer(data, dtype=np.uint8)  # [num_bytes]
    ends, non_ascii = _scan(buffer)  # [num_lines] where each line ends (its newline), [num_non_ascii_bytes]
    if data[-1] != _NEWLINE:
        ends = np.append(ends, len(data))
    starts = np.zeros_like(ends)  # [num_lines]
    starts[1:] = ends[:-1] + 1
    _check_text(buffer, non_ascii)
    length = ends - starts  # [num_lines]
    nonempty = length > 0
    first = np.where(nonempty, buffer[np.minimum(starts, len(data) - 1)], 0)  # [num_lines] first byte (0: none)
    last = np.where(nonempty, buffer[ends - 1], 0)  # [num_lines] last byte
    before_last = np.where(length >= 2, buffer[np.maximum(ends - 2, 0)], 0)
    is_marker = first == ord("#")
    is_row = nonempty & ~is_marker
    # A row whose cell is "-" ends with a tab or space and "-": it is only counted.
    dash_row = (last == ord("-")) & ((before_last == _TAB) | (before_last == _SPACE))
    has_cell = is_row & ~dash_row
    # A line ending in printable ASCII is a row; another may be whitespace only (a blank line).
    for line in np.flatnonzero(has_cell & ((last <= _SPACE) | (last >= 127))).tolist():
        if not data[starts[line] : ends[line]].decode("utf-8").strip():
            is_row[line] = has_cell[line] = False

    doc_keys, begin_lines, end_lines = _documents(data, starts, ends, is_marker)
    row_count = np.cumsum(is_row)  # [num_lines] rows up to and including each line
    rows_per_document = row_count[end_lines] - row_count[begin_lines]  # [num_documents]
    if (rows_per_document == 0).any() or int(rows_per_document.sum()) != int(row_count[-1]):
        raise _NotFast  # an empty document, or a row outside the documents
    cell_lines = np.flatnonzero(has_cell)  # [num_cells]
    document_of_cell = np.searchsorted(begin_lines, cell_lines) - 1  # [num_cells]
    word_of_cell = row_count[cell_lines] - row_count[begin_lines[document_of_cell]] - 1  # [num_cells]
    kind, cluster_id, event_cell = _cell_events_of_lines(data, buffer, starts[cell_lines], ends[cell_lines])
    clusters, cluster_documents = _pair_brackets(
        document_of_cell[event_cell], word_of_cell[event_cell], kind, cluster_id
    )
    bounds = np.searchsorted(cluster_documents, np.arange(len(doc_keys) + 1)).tolist()  # clusters of each document
    return {doc_key: clusters[bounds[index] : bounds[index + 1]] for index, doc_key in enumerate(doc_keys)}


def _scan(buffer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the newlines and of the non-ASCII bytes.

    Read in blocks through one small mask: a mask of the whole file would be fresh
    memory, whose first use costs more than the comparison.
    """
    mask = np.empty(min(len(buffer), _SCAN_BLOCK), dtype=bool)
    newlines, non_ascii = [], []
    for start in range(0, len(buffer), _SCAN_BLOCK):
        block = buffer[start : start + _SCAN_BLOCK]
        block_mask = mask[: len(block)]
        np.equal(block, _NEWLINE, out=block_mask)
        newlines.append(np.flatnonzero(block_mask) + start)
        np.greater_equal(block, 0x80, out=block_mask)
        if block_mask.any():
            non_ascii.append(np.flatnonzero(block_mask) + start)
    return np.concatenate(newlines), np.concatenate(non_ascii) if non_ascii else np.zeros(0, dtype=np.intp)


def _check_text(buffer: np.ndarray, non_ascii: np.ndarray) -> None:
    """UTF-8 without Unicode line breaks, checked on the runs of non-ASCII bytes only.

    An ASCII byte ends any UTF-8 sequence, so the file is valid when each run is;
    the runs are decoded at once, joined by newlines.
    """
    if not len(non_ascii):
        return
    run_starts = np.flatnonzero(np.diff(non_ascii) != 1) + 1  # [num_runs - 1]
    runs = np.insert(buffer[non_ascii], run_starts, _NEWLINE).tobytes()
    try:
        text = runs.decode("utf-8")
    except UnicodeDecodeError:
        raise _NotFast from None
    if any(line_break in text for line_break in _UNICODE_LINE_BREAKS):
        raise _NotFast


def _documents(
    data: bytes | mmap.mmap, starts: np.ndarray, ends: np.ndarray, is_marker: np.ndarray
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Each document's key and its ``#begin document`` and ``#end document`` line."""
    markers = np.flatnonzero(is_marker)  # [2 * num_documents]
    if len(markers) % 2:
        raise _NotFast
    doc_keys: list[str] = []
    for position, line in enumerate(markers.tolist()):
        text = data[starts[line] : ends[line]].decode("utf-8")
        if position % 2:
            if not text.startswith("#end document"):
                raise _NotFast
            continue
        if not text.startswith("#begin document "):
            raise _NotFast
        name, part = parse_header(text)
        doc_key = name if part is None else f"{name}_{part}"
        if doc_key in doc_keys:
            raise _NotFast  # read_conll's reading says so
        doc_keys.append(doc_key)
    return doc_keys, markers[0::2], markers[1::2]


def _cell_events_of_lines(
    data: bytes | mmap.mmap, buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The bracket events of each line's last cell, in line order and, within a cell, in reference order.

    Returns each event's kind (``_SINGLE``, ``_OPEN``, ``_CLOSE``), cluster id and
    line (index into ``starts``). A cell ``(N)``, ``(N`` or ``N)`` is read in
    arrays from the line's last bytes; any other cell with ``parse_coref_column``.
    """
    num_cells = len(starts)
    window = _line_tails(buffer, starts, ends)  # [num_cells, W]
    is_space = (window == _TAB) | (window == _SPACE)
    cell_start = _WINDOW - np.argmax(is_space[:, ::-1], axis=1)  # [num_cells] after the last space
    in_cell = np.arange(_WINDOW) >= cell_start[:, None]  # [num_cells, W]
    is_digit = (window >= ord("0")) & (window <= ord("9")) & in_cell
    opens = window[np.arange(num_cells), np.minimum(cell_start, _WINDOW - 1)] == ord("(")  # [num_cells]
    closes = window[:, -1] == ord(")")
    num_digits = is_digit.sum(axis=1)  # [num_cells]
    simple = (
        is_space.any(axis=1)
        & (opens | closes)
        & (num_digits >= 1)
        & (num_digits == _WINDOW - cell_start - opens - closes)
    )
    digits = np.where(is_digit, window - ord("0"), 0).astype(np.int64)  # [num_cells, W]
    value = np.where(closes, digits @ _PLACES_BEFORE_LAST, digits @ _PLACES)  # [num_cells] the cluster id
    kind = np.where(opens & closes, _SINGLE, np.where(opens, _OPEN, _CLOSE))  # [num_cells]

    counts = np.ones(num_cells, dtype=np.int64)  # [num_cells] events per cell
    other_events: list[tuple[tuple[int, int], ...]] = []
    others = np.flatnonzero(~simple).tolist()
    for line_start, line_end in zip(starts[others].tolist(), ends[others].tolist(), strict=True):
        line = data[line_start:line_end]
        cell = line.rsplit(None, 1)[-1]
        if _PLAIN_CELL_BYTES.issuperset(cell):
            other_events.append(_cell_events(cell.decode("ascii")))
        else:  # split as read_conll splits it (Unicode whitespace)
            other_events.append(_cell_events(line.decode("utf-8").rsplit(None, 1)[-1]))
    counts[others] = [len(events) for events in other_events]
    event_cell = np.repeat(np.arange(num_cells), counts)  # [num_events]
    first_event = np.cumsum(counts) - counts  # [num_cells]
    event_kind = np.empty(len(event_cell), dtype=np.int64)  # [num_events]
    event_cluster = np.empty(len(event_cell), dtype=np.int64)  # [num_events]
    simple_events = first_event[simple]
    event_kind[simple_events] = kind[simple]
    event_cluster[simple_events] = value[simple]
    listed = [event for events in other_events for event in events]
    if listed:
        other_counts = counts[others]
        at = np.repeat(first_event[others] - (np.cumsum(other_counts) - other_counts), other_counts) + np.arange(
            len(listed)
        )  # [num_listed] where each listed event goes
        event_kind[at] = [event_kind_code for event_kind_code, _ in listed]
        try:
            event_cluster[at] = [cluster_id for _, cluster_id in listed]
        except OverflowError:  # a cluster id beyond int64
            raise _NotFast from None
    return event_kind, event_cluster, event_cell


def _line_tails(buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The last ``_WINDOW`` bytes of each line, spaces standing for what comes before the line: [num_lines, W]."""
    if len(buffer) >= _WINDOW:
        tails = sliding_window_view(buffer, _WINDOW)[np.maximum(ends - _WINDOW, 0)]  # [num_lines, W]
        short = np.flatnonzero(ends - starts < _WINDOW)
    else:
        tails = np.empty((len(ends), _WINDOW), dtype=np.uint8)
        short = np.arange(len(ends))
    positions = ends[short, None] + np.arange(-_WINDOW, 0)  # [num_short, W]
    short_tails = buffer[np.maximum(positions, 0)]
    short_tails[positions < starts[short, None]] = _SPACE
    tails[short] = short_tails
    return tails


@lru_cache(maxsize=1 << 16)
def _cell_events(cell: str) -> tuple[tuple[int, int], ...]:
    """A coreference cell's events ``(kind code, cluster id)`` in reference order, as ``parse_coref_column`` reads them.

    Parts ``(N)``, ``(N`` and ``N)`` are read here; a cell with any other part goes to ``parse_coref_column``.
    """
    try:
        return tuple(_read_cell(cell))
    except ValueError:  # as read_conll reports it
        raise _NotFast from None


def _read_cell(cell: str) -> list[tuple[int, int]]:
    events: list[tuple[int, int]] = []
    for piece in cell.split("|"):
        if piece[:1] == "(":
            if piece[-1:] == ")" and piece[1:-1].isdigit():
                events.append((_SINGLE, int(piece[1:-1])))
                continue
            if piece[1:].isdigit():
                events.append((_OPEN, int(piece[1:])))
                continue
        elif piece[-1:] == ")" and piece[:-1].isdigit():
            events.append((_CLOSE, int(piece[:-1])))
            continue
        return [(_EVENT_CODES[kind], cluster_id) for kind, cluster_id in parse_coref_column(cell, "reference")]
    events.sort(key=itemgetter(0))  # singles, openings, closings, as the reference reads them
    return events


def _pair_brackets(
    document: np.ndarray, word: np.ndarray, kind: np.ndarray, cluster_id: np.ndarray
) -> tuple[list[Cluster], np.ndarray]:
    """Mentions from bracket events (in reading order), as ``read_conll(strict_mentions=False)`` builds them.

    An opening bracket pairs with the next closing bracket of its cluster at the
    same nesting depth (the stack ``read_conll`` keeps per cluster). Returns the
    clusters, by document and, within one, in the order of their first bracket
    (each cluster's mentions in the order they are completed), and each cluster's document.
    """
    num_events = len(kind)
    if not num_events:
        return [], np.zeros(0, dtype=np.int64)
    if (int(document.max()) + 1) * (int(cluster_id.max()) + 1) >= _SAFE_KEY:
        raise _NotFast
    # [num_events] by document, cluster, then reading order
    order = np.argsort(document * (int(cluster_id.max()) + 1) + cluster_id, kind="stable")
    sorted_document, sorted_cluster = document[order], cluster_id[order]
    new_group = np.ones(num_events, dtype=bool)
    new_group[1:] = (sorted_document[1:] != sorted_document[:-1]) | (sorted_cluster[1:] != sorted_cluster[:-1])
    group_of_sorted = np.cumsum(new_group) - 1  # [num_events]
    group_starts = np.flatnonzero(new_group)  # [num_groups]
    group = np.empty(num_events, dtype=np.int64)  # [num_events] group of each event
    group[order] = group_of_sorted
    group_first_event = order[group_starts]  # [num_groups] the group's first bracket (reading order)

    step = np.where(kind == _OPEN, 1, np.where(kind == _CLOSE, -1, 0))[order]  # [num_events] sorted
    running = np.cumsum(step)
    depth = running - (running[group_starts] - step[group_starts])[group_of_sorted]  # after each event
    group_ends = np.append(group_starts[1:], num_events) - 1
    if (depth < 0).any() or (depth[group_ends] != 0).any():
        raise _NotFast  # a bracket closed before it was opened, or never closed
    depth_of_event = np.empty(num_events, dtype=np.int64)
    depth_of_event[order] = depth
    brackets = np.flatnonzero(kind != _SINGLE)  # [num_brackets] reading order
    level = depth_of_event[brackets] + (kind[brackets] == _CLOSE)  # the depth an opening reaches
    # open, close, open, close, ... per cluster and depth
    paired = brackets[np.argsort(group[brackets] * (int(level.max(initial=0)) + 1) + level, kind="stable")]
    openings, closings = paired[0::2], paired[1::2]
    if len(openings) != len(closings) or (kind[openings] != _OPEN).any() or (kind[closings] != _CLOSE).any():
        raise _NotFast
    singles = np.flatnonzero(kind == _SINGLE)
    span_start = np.concatenate([word[openings], word[singles]])  # [num_mentions]
    span_end = np.concatenate([word[closings], word[singles]])
    completed = np.concatenate([closings, singles])  # the event completing each mention
    span_group = group[completed]
    span_order = np.argsort(group_first_event[span_group] * num_events + completed)
    spans = list(zip(span_start[span_order].tolist(), span_end[span_order].tolist(), strict=True))
    sorted_groups = span_group[span_order]
    boundaries = np.flatnonzero(sorted_groups[1:] != sorted_groups[:-1]) + 1
    cluster_starts = [0, *boundaries.tolist()]
    cluster_ends = [*boundaries.tolist(), len(spans)]
    clusters = [spans[start:end] for start, end in zip(cluster_starts, cluster_ends, strict=True)]
    return clusters, sorted_document[group_starts][sorted_groups[cluster_starts]]


def _check_same_documents(key: ClustersByDoc, response: ClustersByDoc, key_source: str, response_source: str) -> None:
    for missing, present_in, absent_from in (
        ([doc for doc in key if doc not in response], key_source, response_source),
        ([doc for doc in response if doc not in key], response_source, key_source),
    ):
        if missing:
            shown = ", ".join(repr(doc) for doc in missing[:5]) + (
                f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            )
            raise ValueError(f"{len(missing)} document(s) of {present_in} missing from {absent_from}: {shown}")


def score_document(
    doc_key: str,
    key_clusters: Sequence[Sequence[Span]],
    response_clusters: Sequence[Sequence[Span]],
    metrics: Sequence[str] = DEFAULT_METRICS,
    remove_singletons: bool = False,
) -> tuple[DocumentScores, int]:
    """Score one document; also returns how many repeated response mentions were dropped."""
    key = deduplicate_mentions(key_clusters, doc_key, "key")
    response = deduplicate_mentions(response_clusters, doc_key, "response")
    dropped = sum(map(len, response_clusters)) - sum(map(len, response))
    if remove_singletons:
        key, response = remove_singleton_clusters(key), remove_singleton_clusters(response)
    overlap = cluster_overlap(key, response)
    counts = {name: METRICS[name](overlap) for name in metrics}
    return DocumentScores(doc_key, counts, mention_identification(overlap)), dropped


def score_documents(
    key_clusters_by_doc: ClustersByDoc,
    response_clusters_by_doc: ClustersByDoc,
    metrics: Iterable[str] = DEFAULT_METRICS,
    remove_singletons: bool = False,
    key_source: str = "the key",
    response_source: str = "the response",
) -> CorpusScores:
    """Score every key document against the response document with the same ``doc_key``.

    A document present on one side only raises ``ValueError`` naming it.
    ``remove_singletons`` drops one-mention clusters (after removing repeats).
    """
    names = check_metrics(metrics)
    _check_same_documents(key_clusters_by_doc, response_clusters_by_doc, key_source, response_source)
    documents = []
    total_dropped = 0
    for doc_key, key_clusters in key_clusters_by_doc.items():
        document, dropped = score_document(
            doc_key, key_clusters, response_clusters_by_doc[doc_key], names, remove_singletons
        )
        documents.append(document)
        total_dropped += dropped
    if total_dropped > REFERENCE_REPEATED_MENTION_LIMIT:
        logger.warning(
            "%s repeats %d mentions (dropped above); the reference scorer v8.01 refuses to score a response "
            "with more than %d repeated mentions: fix the system output",
            response_source,
            total_dropped,
            REFERENCE_REPEATED_MENTION_LIMIT,
        )
    return pool(documents, names)


def score_files(
    key_path: str | Path,
    response_path: str | Path,
    metrics: Iterable[str] = DEFAULT_METRICS,
    remove_singletons: bool = False,
) -> CorpusScores:
    """Score a response CoNLL-2012 file against a key file."""
    names = check_metrics(metrics)
    key, response = _read_pair(key_path, response_path)
    return score_documents(key, response, names, remove_singletons, str(key_path), str(response_path))


def _read_pair(key_path: str | Path, response_path: str | Path) -> tuple[dict[str, list[Cluster]], ...]:
    """``read_clusters`` of both files, the response in a second thread (numpy and file reads release the GIL).

    An error in the key is raised first, as if the files were read one after the other.
    """
    outcome: dict[str, Any] = {}

    def read_response() -> None:
        try:
            outcome["clusters"] = read_clusters(response_path)
        except BaseException as error:  # re-raised in the calling thread
            outcome["error"] = error

    thread = threading.Thread(target=read_response, name="read-response", daemon=True)
    thread.start()
    try:
        key = read_clusters(key_path)
    finally:
        thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return key, outcome["clusters"]
