"""Words -> subword segments and maps, in Joshi et al.'s "jsonlines" format.

Reproduces ``minimize.py`` of the original BERT coreference code exactly:

* segments are ``[CLS] + subtokens + [SEP]``, at most ``max_segment_len`` long,
  filled greedily with whole sentences; a sentence longer than a segment is
  split at a word boundary; if a single word does not fit, it is an error;
  (new, for Xia et al.'s segment-length study: a :class:`SegmentLength` of
  ``N`` sentences, written ``"Nsent"``, also ends a segment after ``N`` sentences,
  within ``MAX_SENTENCE_SEGMENT_LEN`` subtokens;)
* ``subtoken_map``: each subtoken's word index; ``[CLS]`` carries the previous
  segment's last word index (0 in the first segment), ``[SEP]`` its own
  segment's last word index;
* ``sentence_map``: each subtoken's sentence index; ``[CLS]`` the current
  sentence, a ``[SEP]`` that closes a sentence already the next one's index;
* ``speakers``: ``[SPL]`` on ``[CLS]``/``[SEP]``, the word's speaker otherwise;
* ``clusters``: inclusive subtoken spans in the flattened document, counting
  ``[CLS]``/``[SEP]``, each cluster listed as ``list(set(spans))`` as the
  original does;
* ``pronouns``: flattened indices of the first subtoken of words tagged PRP.

One deliberate difference: a word that the tokenizer turns into no subtokens
at all becomes the tokenizer's unknown token, so every word keeps a subtoken.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from coref_pipeline.errors import UserError
from coref_pipeline.files import atomic_write_json, record_beside
from coref_pipeline.formats.conll import normalize_word, paused_gc

logger = logging.getLogger(__name__)

# The speaker of [CLS] and [SEP] in the jsonlines "speakers" field.
SPEAKER_PLACEHOLDER = "[SPL]"


# Subtokens a segment of whole sentences may hold (BERT's positions); a longer group is split as minimize.py splits.
MAX_SENTENCE_SEGMENT_LEN = 512
SENTENCES_SUFFIX = "sent"  # "5sent": segments of 5 sentences


class SegmentationError(UserError, ValueError):
    """A document that cannot be split into segments of the requested length."""


class SegmentationMismatchError(UserError, ValueError):
    """Documents segmented with another tokenizer or segment length than the model's."""


@dataclass(frozen=True)
class SegmentLength:
    """How long segments are: at most ``subtokens`` subtokens and, when set, at most ``sentences`` sentences.

    Written as its ``label``: an integer (subtokens, minimize.py's ``--seg-len``)
    or ``"Nsent"`` (N sentences within ``MAX_SENTENCE_SEGMENT_LEN`` subtokens). The
    label names the jsonlines partition (``{split}.{language}.{label}``).
    """

    subtokens: int
    sentences: int | None = None

    @classmethod
    def parse(cls, value: int | str) -> SegmentLength:
        """``384`` or ``"384"``: subtokens; ``"5sent"``: sentences. Raises ``ValueError`` on anything else."""
        text = str(value).strip()
        if text.endswith(SENTENCES_SUFFIX) and text[: -len(SENTENCES_SUFFIX)].isdigit():
            sentences = int(text[: -len(SENTENCES_SUFFIX)])
            if sentences < 1:
                raise ValueError(f"segment length {value!r}: at least 1 sentence")
            return cls(MAX_SENTENCE_SEGMENT_LEN, sentences)
        if isinstance(value, bool) or not text.isdigit():
            raise ValueError(
                f"segment length {value!r}: a number of subtokens (e.g. 384) "
                f"or of sentences (e.g. '5{SENTENCES_SUFFIX}')"
            )
        if int(text) < 3:
            raise ValueError(f"segment length {value!r}: at least 3 subtokens ([CLS], a word, [SEP])")
        return cls(int(text))

    @property
    def label(self) -> int | str:
        """``384`` (an int, as minimize.py names its files) or ``"5sent"``."""
        return self.subtokens if self.sentences is None else f"{self.sentences}{SENTENCES_SUFFIX}"


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """SHA-256 of what decides a tokenizer's subtokens: its vocabulary, normaliser and pre-tokenizer."""
    backend = json.loads(tokenizer.backend_tokenizer.to_str())
    decisive = [backend["model"].get("vocab"), backend.get("normalizer"), backend.get("pre_tokenizer")]
    return hashlib.sha256(json.dumps(decisive, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class SegmentationRecord:
    """How a corpus was segmented: written beside its jsonlines, checked by training and ``predict``.

    ``tokenizer`` is the name it was given (``embedded:minilm``, a hub id, a
    folder); ``fingerprint`` identifies its subtokens (:func:`tokenizer_fingerprint`),
    so a folder holding a copy of a hub tokenizer matches the hub id.
    """

    tokenizer: str
    fingerprint: str
    max_segment_lens: tuple[int | str, ...]  # SegmentLength labels: 384, "5sent"
    language: str = "english"  # the partitions' names: {split}.{language}.{max_segment_len}

    @classmethod
    def of(
        cls, tokenizer_name: str, tokenizer: Any, max_segment_lens: Sequence[int | str], language: str = "english"
    ) -> SegmentationRecord:
        lengths = tuple(SegmentLength.parse(n).label for n in max_segment_lens)
        return cls(tokenizer_name, tokenizer_fingerprint(tokenizer), lengths, language)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokenizer": self.tokenizer,
            "fingerprint": self.fingerprint,
            "max_segment_lens": list(self.max_segment_lens),
            "language": self.language,
        }

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> SegmentationRecord:
        try:
            return cls(
                values["tokenizer"], values["fingerprint"], tuple(values["max_segment_lens"]), values["language"]
            )
        except (KeyError, TypeError) as error:
            raise SegmentationMismatchError(f"not a segmentation record ({error!r} missing or malformed)") from None

    def save(self, path: str | Path) -> None:
        atomic_write_json(self.to_dict(), path)

    @classmethod
    def load(cls, path: str | Path) -> SegmentationRecord:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    def check(
        self, tokenizer_name: str, tokenizer: Any, max_segment_len: int | str | None, what: str, resegment: str
    ) -> None:
        """Raise :class:`SegmentationMismatchError` unless ``what`` (e.g. "the model") reads these documents.

        ``max_segment_len`` None checks the tokenizer only (inference reads any
        length up to the model's). ``resegment`` is the command that segments them for it.
        """
        if tokenizer_fingerprint(tokenizer) != self.fingerprint:
            raise SegmentationMismatchError(
                f"the documents were segmented with tokenizer {self.tokenizer!r}, {what} uses {tokenizer_name!r} "
                f"(another vocabulary): re-segment them with `{resegment}`"
            )
        self.check_length(max_segment_len, what, resegment)

    def check_length(self, max_segment_len: int | str | None, what: str, resegment: str) -> None:
        """Raise :class:`SegmentationMismatchError` unless the documents were segmented at ``max_segment_len``
        (None: any)."""
        if max_segment_len is not None and max_segment_len not in self.max_segment_lens:
            raise SegmentationMismatchError(
                f"the documents were segmented at max_segment_len {list(self.max_segment_lens)}, {what} reads "
                f"{max_segment_len}: re-segment them with `{resegment}`"
            )


def sidecar_path(jsonlines_path: str | Path) -> Path:
    """Where the :class:`SegmentationRecord` of a jsonlines file is kept: ``NAME.segmentation.json`` beside it."""
    return record_beside(jsonlines_path, "segmentation")


def check_vocabulary(documents: Sequence[Mapping[str, Any]], tokenizer: Any, what: str, resegment: str) -> None:
    """Without a record: every subtoken must be in the tokenizer's vocabulary (else another tokenizer made them)."""
    vocabulary = tokenizer.get_vocab()
    for document in documents:
        for segment in document["sentences"]:
            unknown = [token for token in segment if token not in vocabulary]
            if unknown:
                raise SegmentationMismatchError(
                    f"document {document['doc_key']!r} has subtokens that {what}'s tokenizer does not know "
                    f"({unknown[:3]}): it was segmented with another tokenizer; re-segment it with `{resegment}`"
                )


@dataclass(frozen=True)
class SpecialTokens:
    """The tokenizer's special tokens used in segments."""

    cls: str = "[CLS]"
    sep: str = "[SEP]"
    unk: str = "[UNK]"

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> SpecialTokens:
        return cls(cls=tokenizer.cls_token, sep=tokenizer.sep_token, unk=tokenizer.unk_token)


@dataclass
class TokenizedDocument:
    """A document's subtokens and the index of the word each subtoken belongs to."""

    subtokens: list[str]
    word_index: np.ndarray  # [num_subtokens] int64, non-decreasing, every word present


def tokenize_documents(
    word_lists: Sequence[Sequence[str]], tokenizer: Any, chunk_size: int = 4096
) -> list[TokenizedDocument]:
    """Subword-tokenize pre-split documents, aligning subtokens to words with ``word_ids``.

    Each distinct word is tokenized once, in batched calls of ``chunk_size``
    words given as pre-split sequences (``is_split_into_words``), which is what
    tokenizing each word on its own gives (``minimize.py``). A word with no
    subtokens becomes the tokenizer's unknown token.
    """
    if not word_lists:
        return []
    word_ids: dict[str, int] = {}
    for words in word_lists:
        for word in words:
            if word not in word_ids:
                word_ids[word] = len(word_ids)
    distinct = list(word_ids)
    pieces: list[list[str]] = [[] for _ in distinct]
    chunks = [distinct[i : i + chunk_size] for i in range(0, len(distinct), chunk_size)]
    for chunk_index, encoding in enumerate(word_encodings(tokenizer, chunks)):
        offset = chunk_index * chunk_size
        for token, word in zip(encoding.tokens, encoding.word_ids, strict=True):
            pieces[offset + word].append(token)
    for word, word_pieces in zip(distinct, pieces, strict=True):
        if not word_pieces:
            logger.warning("Word %r has no subtokens; using %s", word, tokenizer.unk_token)
            word_pieces.append(tokenizer.unk_token)
    piece_counts = np.fromiter((len(word_pieces) for word_pieces in pieces), dtype=np.int64, count=len(pieces))

    tokenized = []
    for words in word_lists:
        ids = np.fromiter((word_ids[word] for word in words), dtype=np.int64, count=len(words))  # [num_words]
        subtokens = list(chain.from_iterable(pieces[i] for i in ids.tolist()))
        word_index = np.repeat(np.arange(len(words), dtype=np.int64), piece_counts[ids])  # [num_subtokens]
        tokenized.append(TokenizedDocument(subtokens=subtokens, word_index=word_index))
    return tokenized


def word_encodings(tokenizer: Any, batches: list[list[str]]) -> list[Any]:
    """The ``tokenizers`` encodings of batches of words, no special tokens added: through the tokenizer's own
    ``encode_words`` where it has one (a model directory's for prediction, which imports no transformers), else
    transformers' fast tokenizer called on the words."""
    encode_words = getattr(type(tokenizer), "encode_words", None)
    if encode_words is not None:
        return encode_words(tokenizer, batches)
    batch = tokenizer(
        batches,
        is_split_into_words=True,
        add_special_tokens=False,
        return_attention_mask=False,
        return_token_type_ids=False,
        verbose=False,
    )
    return batch.encodings


def split_into_segments(
    sentence_end: np.ndarray,
    token_end: np.ndarray,
    max_segment_len: int,
    doc_key: str = "?",
    max_sentences: int | None = None,
) -> list[tuple[int, int]]:
    """Greedy segment boundaries ``(first, last)`` over subtokens, as ``minimize.py``.

    Each segment ends on a sentence end if one fits, else on a word end. With
    ``max_sentences`` N a segment also ends at the latest after its N-th sentence end.
    """
    if max_segment_len < 3:
        raise SegmentationError(f"max_segment_len must be at least 3, got {max_segment_len}")
    if max_sentences is not None and max_sentences < 1:
        raise SegmentationError(f"max_sentences must be at least 1, got {max_sentences}")
    num_subtokens = len(sentence_end)
    sentence_ends = np.flatnonzero(sentence_end).tolist()
    word_ends = np.flatnonzero(token_end).tolist()
    bounds = []
    current = 0
    while current < num_subtokens:
        limit = min(current + max_segment_len - 3, num_subtokens - 1)
        if max_sentences is not None:  # the N-th sentence end from here, if it comes sooner
            nth = bisect.bisect_left(sentence_ends, current) + max_sentences - 1
            if nth < len(sentence_ends):
                limit = min(limit, sentence_ends[nth])
        end = _last_at_most(sentence_ends, limit)
        if end < current:
            end = _last_at_most(word_ends, limit)
            if end < current:
                raise SegmentationError(
                    f"document {doc_key!r}: cannot split at subtoken {current}: the word there has more than "
                    f"{max_segment_len - 2} subtokens, so it does not fit a segment of {max_segment_len}"
                )
        bounds.append((current, end))
        current = end + 1
    return bounds


def _last_at_most(sorted_positions: list[int], limit: int) -> int:
    index = bisect.bisect_right(sorted_positions, limit)
    return sorted_positions[index - 1] if index else -1


def segment_document(
    doc_key: str,
    tokenized: TokenizedDocument,
    sentence_ids: Sequence[int],
    speakers: Sequence[str],
    pos: Sequence[str],
    clusters: Sequence[Sequence[Sequence[int]]],
    max_segment_len: int,
    special: SpecialTokens = SpecialTokens(),
    words: Sequence[str] | None = None,
    max_sentences: int | None = None,
) -> dict[str, Any]:
    """One document in Joshi et al.'s jsonlines format (a JSON-ready dict).

    ``clusters`` are word-level inclusive spans; ``words`` (optional) are added
    as the ``tokens`` field; ``max_sentences``: at most that many sentences per segment.
    """
    subtokens = tokenized.subtokens
    word_index = tokenized.word_index  # [num_subtokens]
    num_subtokens = len(subtokens)
    sentence_of_word = np.asarray(sentence_ids, dtype=np.int64)  # [num_words]
    token_end = np.ones(num_subtokens, dtype=bool)  # last subtoken of its word
    token_end[:-1] = word_index[1:] != word_index[:-1]
    sentence_of_token = sentence_of_word[word_index]  # [num_subtokens]
    sentence_end = token_end.copy()  # last subtoken of its sentence
    sentence_end[:-1] &= sentence_of_token[1:] != sentence_of_token[:-1]

    bounds = split_into_segments(sentence_end, token_end, max_segment_len, doc_key, max_sentences)
    num_segments = len(bounds)
    # Position of each subtoken in the flattened document, counting [CLS]/[SEP].
    segment_of_token = np.repeat(np.arange(num_segments), [last - first + 1 for first, last in bounds])
    flat_position = np.arange(num_subtokens) + 2 * segment_of_token + 1  # [num_subtokens]

    word_list = word_index.tolist()
    sentence_list = sentence_of_token.tolist()
    sentence_end_list = sentence_end.tolist()
    segments, subtoken_map, sentence_map, segment_speakers = [], [], [], []
    previous_word = 0
    for first, last in bounds:
        segments.append([special.cls, *subtokens[first : last + 1], special.sep])
        words_here = word_list[first : last + 1]
        subtoken_map.append(previous_word)
        subtoken_map.extend(words_here)
        subtoken_map.append(words_here[-1])
        previous_word = words_here[-1]
        sentence_map.append(sentence_list[first])
        sentence_map.extend(sentence_list[first : last + 1])
        sentence_map.append(sentence_list[last] + int(sentence_end_list[last]))
        segment_speakers.append([SPEAKER_PLACEHOLDER, *[speakers[w] for w in words_here], SPEAKER_PLACEHOLDER])

    token_start = np.ones(num_subtokens, dtype=bool)  # first subtoken of its word
    token_start[1:] = token_end[:-1]
    first_subtoken = np.empty(len(sentence_of_word), dtype=np.int64)  # [num_words]
    last_subtoken = np.empty(len(sentence_of_word), dtype=np.int64)  # [num_words]
    first_subtoken[word_index[token_start]] = flat_position[token_start]
    last_subtoken[word_index[token_end]] = flat_position[token_end]
    first_list, last_list = first_subtoken.tolist(), last_subtoken.tolist()

    subtoken_clusters = []
    for cluster in clusters:
        spans = [(first_list[int(start)], last_list[int(end)]) for start, end in cluster]
        # minimize.py stores each cluster as a set of tuples, then lists it.
        subtoken_clusters.append([list(span) for span in set(spans)])
    pronouns = [first_list[w] for w, tag in enumerate(pos) if tag == "PRP"]

    document: dict[str, Any] = {
        "doc_key": doc_key,
        "sentences": segments,
        "speakers": segment_speakers,
        "constituents": [],
        "ner": [],
        "clusters": subtoken_clusters,
        "sentence_map": sentence_map,
        "subtoken_map": subtoken_map,
        "pronouns": pronouns,
    }
    if words is not None:
        document["tokens"] = list(words)
    return document


def check_field_lengths(document: Mapping[str, Any], where: str) -> None:
    """A jsonlines document's per-subtoken fields must be as long as its segments (``where`` names it)."""
    segments = document.get("sentences")
    if not isinstance(segments, list) or not all(isinstance(segment, list) for segment in segments):
        raise SegmentationError(f"{where}: 'sentences' must be a list of segments (lists of subtokens)")
    num_subtokens = sum(len(segment) for segment in segments)
    lengths = {"subtoken_map": document.get("subtoken_map"), "sentence_map": document.get("sentence_map")}
    speakers = document.get("speakers")
    if isinstance(speakers, list) and all(isinstance(segment, list) for segment in speakers):
        lengths["speakers"] = [speaker for segment in speakers for speaker in segment]
    for field_name, values in lengths.items():
        if not isinstance(values, list) or len(values) != num_subtokens:
            found = f"{len(values)} entries" if isinstance(values, list) else type(values).__name__
            raise SegmentationError(
                f"{where}: field {field_name!r} has {found} for {num_subtokens} subtokens in 'sentences'"
            )


def flatten(nested: Sequence[Sequence[Any]]) -> list[Any]:
    """Concatenate a list of lists."""
    return [item for inner in nested for item in inner]


def check_document(document: dict[str, Any], max_segment_len: int) -> None:
    """Raise ``AssertionError`` if a jsonlines document breaks the format's invariants."""
    doc_key = document["doc_key"]
    flat = flatten(document["sentences"])
    num = len(flat)
    assert (
        num == len(flatten(document["speakers"])) == len(document["subtoken_map"]) == len(document["sentence_map"])
    ), f"{doc_key}: field lengths differ"
    assert all(len(segment) <= max_segment_len for segment in document["sentences"]), f"{doc_key}: segment too long"
    special, offset = set(), 0
    for segment in document["sentences"]:
        special.update((offset, offset + len(segment) - 1))
        offset += len(segment)
    sentence_map = document["sentence_map"]
    for cluster in document["clusters"]:
        for start, end in cluster:
            assert start not in special and end not in special, f"{doc_key}: mention {start, end} on [CLS]/[SEP]"
            assert sentence_map[start] == sentence_map[end], f"{doc_key}: mention {start, end} crosses sentences"


def segment_words(
    frame: Any,
    tokenizer: Any,
    max_segment_lens: Sequence[int | str],
    include_tokens: bool,
    description: str = "segment",
) -> dict[int | str, list[dict[str, Any]]]:
    """Word-level documents (a ``preprocess`` frame) at every length: ``{label: [jsonlines document]}``.

    A length is a :class:`SegmentLength` label: subtokens (``384``) or sentences (``"5sent"``).
    """
    from tqdm.auto import tqdm

    with paused_gc():
        words = [[normalize_word(word) for word in doc_words] for doc_words in frame["words"]]
        tokenized = tokenize_documents(words, tokenizer)
        special = SpecialTokens.from_tokenizer(tokenizer)
        outputs = {}
        for length in map(SegmentLength.parse, max_segment_lens):
            rows = zip(frame.itertuples(index=False), tokenized, words, strict=True)
            outputs[length.label] = [
                segment_document(
                    row.doc_key,
                    tokens,
                    row.sentence_ids,
                    row.speakers,
                    row.pos,
                    row.clusters,
                    length.subtokens,
                    special,
                    words=doc_words if include_tokens else None,
                    max_sentences=length.sentences,
                )
                for row, tokens, doc_words in tqdm(rows, total=len(frame), desc=f"{description} {length.label}")
            ]
        return outputs
