"""Corpora: CoNLL-2012 files -> word-level documents -> segmented jsonlines, and their selection.

``preprocess_corpus`` and ``segment_corpus`` are what the ``preprocess`` and
``segment`` pipelines (and ``coref-pipeline minimize``) run; a
:class:`SegmentedCorpus` is what training and evaluation read: jsonlines
partitions named as ``minimize.py`` names its files, plus the
:class:`~coref_pipeline.formats.segmentation.SegmentationRecord` that says how they were made.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from coref_pipeline.config_base import Config, ConfigError
from coref_pipeline.formats.conll import (
    DEFAULT_GENRE,
    GENRES,
    ConllDocument,
    ConllFile,
    ConllFormatError,
    genre_of,
    parse_conll_lines,
)
from coref_pipeline.formats.segmentation import (
    SegmentationMismatchError,
    SegmentationRecord,
    SegmentLength,
    segment_words,
)
from coref_pipeline.pretrained import PretrainedUnavailableError, load_tokenizer

if TYPE_CHECKING:  # imported where a frame is built: `predict` reads no frame (0.2 s of its start)
    import pandas as pd

logger = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")
WORD_DOCUMENT_COLUMNS = ["doc_key", "name", "part", "genre", "words", "sentence_ids", "speakers", "pos", "clusters"]
RESEGMENT_COMMAND = "kedro run --pipelines=segment"


@dataclass(frozen=True)
class PreprocessSettings(Config):
    """How CoNLL-2012 files are read (the ``preprocess`` parameters)."""

    what: ClassVar[str] = "preprocess"

    min_columns: int = 12  # columns a row needs (OntoNotes has 12 or more; coreference is the last)
    skip_bad_documents: bool = False  # report and skip documents with errors instead of stopping
    genres: tuple[str, ...] = GENRES  # genre = first two letters of doc_key when in this list
    default_genre: str = DEFAULT_GENRE  # ... else this one

    def __post_init__(self) -> None:
        if self.min_columns < 1:
            raise ConfigError(f"preprocess key 'min_columns' must be at least 1, got {self.min_columns}")


@dataclass(frozen=True)
class SegmentSettings(Config):
    """How word-level documents are segmented (the ``segment`` parameters).

    ``tokenizer`` and ``max_segment_lens`` left null follow the model that will
    read the segments (``coref_train``'s chosen preset): the one source of both.
    """

    what: ClassVar[str] = "segment"

    tokenizer: str | None = None  # embedded:minilm, a hub id or a folder; null: the preset's
    # SegmentLength labels: subtokens (384) or sentences ("5sent"); null: the preset's segment length
    max_segment_lens: tuple[int | str, ...] | None = None
    language: str = "english"  # the partitions' names: {split}.{language}.{max_segment_len}
    include_tokens: bool = True  # add the words as a "tokens" field (minimize.py does not write it)

    def __post_init__(self) -> None:
        if self.max_segment_lens is None:
            return
        if not self.max_segment_lens:
            raise ConfigError("segment key 'max_segment_lens': an empty list (null: the preset's length)")
        try:
            labels = tuple(SegmentLength.parse(length).label for length in self.max_segment_lens)
        except ValueError as error:
            raise ConfigError(f"segment key 'max_segment_lens': {error}") from None
        object.__setattr__(self, "max_segment_lens", labels)


def documents_to_frame(
    documents: Sequence[ConllDocument], genres: Sequence[str] = GENRES, default_genre: str = DEFAULT_GENRE
) -> pd.DataFrame:
    """One row per document (part) with list columns; clusters as ``[[[start, end], ...], ...]``."""
    rows = [
        {
            "doc_key": document.doc_key,
            "name": document.name,
            "part": document.part if document.part is not None else 0,
            "genre": genre_of(document.doc_key, genres, default_genre),
            "words": document.words,
            "sentence_ids": document.sentence_ids,
            "speakers": document.speakers,
            "pos": document.pos,
            "clusters": [[list(span) for span in cluster] for cluster in document.clusters],
        }
        for document in documents
    ]
    import pandas as pd

    return pd.DataFrame(rows, columns=WORD_DOCUMENT_COLUMNS)


def preprocess_corpus(conll_file: ConllFile, settings: PreprocessSettings = PreprocessSettings()) -> pd.DataFrame:
    """Parse a CoNLL-2012 file into word-level documents, one row per document part."""
    errors: list = []
    documents = parse_conll_lines(
        conll_file.text.splitlines(),
        conll_file.path,
        min_columns=settings.min_columns,
        skip_bad_documents=settings.skip_bad_documents,
        errors=errors,
    )
    if errors:
        logger.warning("%s: skipped %d bad document(s)", conll_file.path, len(errors))
    if not documents:
        reason = f"all {len(errors)} documents have errors" if errors else "no documents (an empty file?)"
        raise ConllFormatError(conll_file.path, None, reason)
    logger.info("%s: %d documents, %d words", conll_file.path, len(documents), sum(len(d.words) for d in documents))
    return documents_to_frame(documents, settings.genres, settings.default_genre)


# A training corpus annotates singletons (as LitBank does, unlike OntoNotes) when at least this share of its
# gold clusters has one mention; it decides mention_loss_coef: auto (models.config.resolve_mention_loss).
SINGLETON_CORPUS_SHARE = 0.05


def singleton_share(documents: Sequence[Mapping[str, Any]]) -> float:
    """The share of one-mention clusters among the documents' gold clusters (0 when there are none)."""
    sizes = [len(cluster) for document in documents for cluster in document.get("clusters", [])]
    return sum(size == 1 for size in sizes) / len(sizes) if sizes else 0.0


def partition_name(split: str, language: str, max_segment_len: int | str) -> str:
    """The jsonlines partition of a split at a segment length (a ``SegmentLength`` label), named as ``minimize.py``
    names files."""
    return f"{split}.{language}.{max_segment_len}"


def segment_corpus(
    frames: Mapping[str, pd.DataFrame],
    tokenizer_name: str,
    max_segment_lens: Sequence[int | str],
    language: str = "english",
    include_tokens: bool = True,
) -> tuple[dict[str, list[dict[str, Any]]], SegmentationRecord]:
    """Segment each split's word-level documents at every length.

    Returns the partitions ``{"{split}.{language}.{length}": [document]}`` and the
    record of the tokenizer, lengths and language used.
    """
    tokenizer = load_tokenizer(tokenizer_name)
    partitions: dict[str, list[dict[str, Any]]] = {}
    for split, frame in frames.items():
        by_length = segment_words(frame, tokenizer, list(max_segment_lens), include_tokens, f"segment {split}")
        for max_segment_len, documents in by_length.items():
            partitions[partition_name(split, language, max_segment_len)] = documents
    return partitions, SegmentationRecord.of(tokenizer_name, tokenizer, max_segment_lens, language)


class SegmentedCorpus:
    """Jsonlines partitions (loaded lazily) with the record of how they were segmented."""

    def __init__(self, partitions: Mapping[str, Any], record: SegmentationRecord | Mapping[str, Any]) -> None:
        self.partitions = partitions
        self.record = SegmentationRecord.from_dict(record) if isinstance(record, Mapping) else record

    def documents(self, split: str, max_segment_len: int | str) -> list[dict[str, Any]]:
        """The documents of one split at one segment length (a ``SegmentLength`` label: 384, "5sent")."""
        name = partition_name(split, self.record.language, max_segment_len)
        if name not in self.partitions:
            raise SegmentationMismatchError(
                f"no segmented documents {name!r} (have {sorted(self.partitions)}): segment at "
                f"{max_segment_len} with `{RESEGMENT_COMMAND} --params segment.max_segment_lens=[{max_segment_len}]`"
            )
        partition = self.partitions[name]
        return partition() if callable(partition) else partition

    def check_tokenizer(self, tokenizer_name: str, tokenizer: Any, max_segment_len: int | str, what: str) -> None:
        """Refuse documents segmented with another tokenizer (or at another length) than ``what`` uses."""
        self.record.check(tokenizer_name, tokenizer, max_segment_len, what, _resegment(tokenizer_name, max_segment_len))

    def check_before_loading(self, tokenizer_name: str, max_segment_len: int | str, what: str) -> None:
        """What can be refused before a model is loaded, offline: the segment length, and a tokenizer of another name.

        The same name is checked in full (its vocabulary) once the model is loaded. Another name
        may still be the same vocabulary (a hub id and a local copy of it): its tokenizer is then
        loaded, which is quick, and compared; where it cannot be had (offline, not cached), the
        documents are refused with both names.
        """
        resegment = _resegment(tokenizer_name, max_segment_len)
        if tokenizer_name == self.record.tokenizer:
            self.record.check_length(max_segment_len, what, resegment)
            return
        try:
            tokenizer = load_tokenizer(tokenizer_name)
        except PretrainedUnavailableError as error:
            raise SegmentationMismatchError(
                f"the documents were segmented with tokenizer {self.record.tokenizer!r}, {what} uses "
                f"{tokenizer_name!r}, which is not available here to compare ({error}): re-segment them with "
                f"`{resegment}`, or choose the preset they were segmented for"
            ) from None
        self.record.check(tokenizer_name, tokenizer, max_segment_len, what, resegment)


def _resegment(tokenizer_name: str, max_segment_len: int | str) -> str:
    """The command that segments the corpus for a model reading ``max_segment_len`` with ``tokenizer_name``."""
    return (
        f"{RESEGMENT_COMMAND} --params segment.tokenizer={tokenizer_name},segment.max_segment_lens=[{max_segment_len}]"
    )


def segment_for_model(
    frames: Mapping[str, pd.DataFrame],
    settings: SegmentSettings,
    model_tokenizer: str,
    model_max_segment_len: int | str,
) -> tuple[dict[str, list[dict[str, Any]]], SegmentationRecord]:
    """Segment for the model that will read the segments: its tokenizer and length unless ``settings`` name others."""
    tokenizer = settings.tokenizer or model_tokenizer
    lengths = settings.max_segment_lens or (model_max_segment_len,)
    return segment_corpus(frames, tokenizer, lengths, settings.language, settings.include_tokens)
