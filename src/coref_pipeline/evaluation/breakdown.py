"""CoNLL F1 broken down by document length, number of speakers and genre (Xia et al. 2020, Table 2).

Document length is counted in subtokens (``len(subtoken_map)`` of the
jsonlines document, ``[CLS]``/``[SEP]`` included). Each group's CoNLL F1 pools
the counts of its documents, as the corpus score does.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from coref_pipeline.evaluation.metrics import CONLL_METRICS
from coref_pipeline.evaluation.scoring import CorpusScores, DocumentScores, pool
from coref_pipeline.files import read_jsonlines
from coref_pipeline.formats.conll import DEFAULT_GENRE, GENRES, NO_SPEAKER, genre_of
from coref_pipeline.formats.segmentation import SPEAKER_PLACEHOLDER

logger = logging.getLogger(__name__)

# (first, last, label); last None = no upper bound.
LENGTH_BUCKETS: tuple[tuple[int, int | None, str], ...] = (
    (0, 128, "0-128"),
    (129, 256, "129-256"),
    (257, 512, "257-512"),
    (513, 768, "513-768"),
    (769, 1152, "769-1152"),
    (1153, None, "1153+"),
)
SPEAKER_GROUPS: tuple[str, ...] = ("1", "2+")
PLACEHOLDER_SPEAKERS = frozenset({NO_SPEAKER, SPEAKER_PLACEHOLDER})


def length_bucket(length: int) -> str:
    """The Xia et al. bucket label of a document of ``length`` subtokens."""
    if length < 0:
        raise ValueError(f"a document length cannot be negative ({length})")
    for first, last, label in LENGTH_BUCKETS:
        if first <= length and (last is None or length <= last):
            return label
    raise AssertionError("buckets cover every length")  # pragma: no cover


def _flatten(values: Iterable[Any]) -> Iterable[str]:
    for value in values:
        if isinstance(value, str):
            yield value
        else:
            yield from _flatten(value)


def count_speakers(speakers: Iterable[Any]) -> int:
    """Distinct speakers (nested lists allowed), ignoring ``-`` and ``[SPL]``; at least 1."""
    return max(1, len({speaker for speaker in _flatten(speakers) if speaker not in PLACEHOLDER_SPEAKERS}))


def speaker_group(num_speakers: int) -> str:
    return "1" if num_speakers <= 1 else "2+"


@dataclass(frozen=True)
class DocumentInfo:
    """What the breakdown needs to know about a document."""

    doc_key: str
    length: int
    speakers: int
    genre: str

    @property
    def bucket(self) -> str:
        return length_bucket(self.length)


def document_info(
    document: Mapping[str, Any], default_genre: str = DEFAULT_GENRE, genres: Sequence[str] = GENRES
) -> DocumentInfo:
    """Length, speaker count and genre of a jsonlines document (``doc_key``, ``subtoken_map``, ``speakers``)."""
    doc_key = document["doc_key"]
    return DocumentInfo(
        doc_key=doc_key,
        length=len(document["subtoken_map"]),
        speakers=count_speakers(document.get("speakers", [])),
        genre=genre_of(doc_key, genres, default_genre),
    )


def read_document_infos(path: str | Path, default_genre: str = DEFAULT_GENRE) -> dict[str, DocumentInfo]:
    """:class:`DocumentInfo` of every document of a jsonlines file, by ``doc_key``."""
    infos = {}
    for document in read_jsonlines(path):
        info = document_info(document, default_genre)
        infos[info.doc_key] = info
    return infos


def _infos_for(scores: CorpusScores, infos: Mapping[str, DocumentInfo]) -> list[tuple[DocumentScores, DocumentInfo]]:
    missing = [document.doc_key for document in scores.documents if document.doc_key not in infos]
    if missing:
        raise ValueError(f"no length/speaker/genre information for {len(missing)} scored document(s): {missing[:5]}")
    return [(document, infos[document.doc_key]) for document in scores.documents]


def document_table(scores: CorpusScores, infos: Mapping[str, DocumentInfo]) -> pd.DataFrame:
    """One row per document: doc_key, length, bucket, speakers, genre, ``{metric}_r/_p/_f1``, conll_f1."""
    rows = []
    for document, info in _infos_for(scores, infos):
        row: dict[str, object] = {
            "doc_key": document.doc_key,
            "length": info.length,
            "bucket": info.bucket,
            "speakers": info.speakers,
            "genre": info.genre,
        }
        for name, counts in document.metrics.items():
            row[f"{name}_r"], row[f"{name}_p"], row[f"{name}_f1"] = counts.recall, counts.precision, counts.f1
        row["conll_f1"] = document.conll_f1 if document.conll_f1 is not None else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def breakdown_table(scores: CorpusScores, infos: Mapping[str, DocumentInfo]) -> pd.DataFrame:
    """Pooled CoNLL F1 per length bucket, speaker group and genre.

    Columns: ``category`` (length / speakers / genre), ``group``, ``documents``,
    ``conll_f1`` (NaN for an empty group). Every length bucket and speaker
    group is listed; genres that occur are listed in sorted order.
    """
    if not all(name in scores.metrics for name in CONLL_METRICS):
        raise ValueError(f"the breakdown needs the CoNLL metrics {', '.join(CONLL_METRICS)}")
    pairs = _infos_for(scores, infos)
    groupings = {
        "length": ([label for _, _, label in LENGTH_BUCKETS], lambda info: info.bucket),
        "speakers": (list(SPEAKER_GROUPS), lambda info: speaker_group(info.speakers)),
        "genre": (sorted({info.genre for _, info in pairs}), lambda info: info.genre),
    }
    rows = []
    for category, (groups, group_of) in groupings.items():
        members: dict[str, list[DocumentScores]] = {group: [] for group in groups}
        for document, info in pairs:
            members[group_of(info)].append(document)
        for group in groups:
            documents = members[group]
            f1 = pool(documents, CONLL_METRICS).conll_f1 if documents else math.nan
            rows.append({"category": category, "group": group, "documents": len(documents), "conll_f1": f1})
    return pd.DataFrame(rows)


def f1_by_length_figure(breakdown: pd.DataFrame, title: str = "CoNLL F1 by document length"):
    """Bar chart of CoNLL F1 per length bucket, each bar annotated with its number of documents."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_length = breakdown[breakdown["category"] == "length"]
    f1_percent = (by_length["conll_f1"].fillna(0.0) * 100).tolist()
    figure, axes = plt.subplots(figsize=(7, 4))
    bars = axes.bar(by_length["group"].tolist(), f1_percent, color="#4C72B0")
    for bar, count in zip(bars, by_length["documents"].tolist(), strict=True):
        axes.annotate(
            f"n={count}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            va="bottom",
        )
    axes.set_xlabel("document length (subtokens)")
    axes.set_ylabel("CoNLL F1 (%)")
    axes.set_ylim(0, 105)
    axes.set_title(title)
    figure.tight_layout()
    return figure


def plot_f1_by_length(breakdown: pd.DataFrame, path: str | Path) -> Path:
    """Write :func:`f1_by_length_figure` as a PNG."""
    import matplotlib.pyplot as plt

    figure = f1_by_length_figure(breakdown)
    try:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=120)
    finally:
        plt.close(figure)
    logger.info("Wrote %s", path)
    return path
