"""What a prediction gives back: ``CorefResult`` (clusters as words, characters and strings) and its views."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coref_pipeline.evaluation.predictions import word_clusters
from coref_pipeline.evaluation.scoring import remove_singleton_clusters
from coref_pipeline.formats.text import SplitText, join_words
from coref_pipeline.serving.visualize import HtmlView


@dataclass
class CorefResult:
    """The clusters of one document.

    * ``clusters``: word spans ``(first_word, last_word)``, inclusive, as in CoNLL-2012 and jsonlines;
    * ``char_clusters``: the same mentions as character spans ``(start, end)`` into ``text``,
      end exclusive, so ``text[start:end]`` is the mention;
    * ``mention_strings``: those substrings.

    Clusters are ordered by their first mention, mentions by position. ``text`` is the
    caller's string; for pre-split input it is the words joined by spaces (sentences by
    newlines). ``document`` is the model's jsonlines input with ``predicted_clusters``
    (subtoken spans).
    """

    doc_key: str
    text: str
    words: list[str]
    word_spans: list[tuple[int, int]]  # each word's character span in ``text``
    sentences: list[list[str]]
    clusters: list[list[tuple[int, int]]]
    char_clusters: list[list[tuple[int, int]]]
    mention_strings: list[list[str]]
    document: dict[str, Any] | None = field(default=None, repr=False)

    def to_dict(self, with_words: bool = True) -> dict[str, Any]:
        """A JSON-ready record (what ``coref-pipeline predict`` writes per document)."""
        record: dict[str, Any] = {"doc_key": self.doc_key, "text": self.text}
        if with_words:
            record["sentences"] = self.sentences
            record["word_spans"] = [list(span) for span in self.word_spans]
        record["clusters"] = [[list(span) for span in cluster] for cluster in self.clusters]
        record["char_clusters"] = [[list(span) for span in cluster] for cluster in self.char_clusters]
        record["mention_strings"] = self.mention_strings
        return record

    def _repr_html_(self) -> str:
        return HtmlView([self])._repr_html_()


def result_from_split(
    doc_key: str, split: SplitText, clusters: Sequence[Sequence[tuple[int, int]]], document: dict[str, Any] | None
) -> CorefResult:
    """A ``CorefResult`` from word-level clusters: sorted, with character spans and mention strings.

    A cluster left with fewer than two mentions (two subtoken spans of the same
    words) is not a coreference cluster and is left out.
    """
    distinct = [sorted({(int(start), int(end)) for start, end in cluster}) for cluster in clusters]
    ordered = sorted(remove_singleton_clusters(distinct), key=lambda cluster: cluster[0])
    spans = split.word_spans
    char_clusters = [[(spans[start][0], spans[end][1]) for start, end in cluster] for cluster in ordered]
    return CorefResult(
        doc_key=doc_key,
        text=split.text,
        words=list(split.words),
        word_spans=[tuple(span) for span in spans],
        sentences=split.sentences,
        clusters=ordered,
        char_clusters=char_clusters,
        mention_strings=[[split.text[start:end] for start, end in cluster] for cluster in char_clusters],
        document=document,
    )


def result_from_record(record: Mapping[str, Any]) -> CorefResult:
    """The ``CorefResult`` whose ``to_dict()`` is ``record`` (what ``coref-pipeline predict`` writes for a text)."""
    sentences = [list(sentence) for sentence in record["sentences"]]
    return CorefResult(
        doc_key=record["doc_key"],
        text=record["text"],
        words=[word for sentence in sentences for word in sentence],
        word_spans=[(start, end) for start, end in record["word_spans"]],
        sentences=sentences,
        clusters=[[(start, end) for start, end in cluster] for cluster in record["clusters"]],
        char_clusters=[[(start, end) for start, end in cluster] for cluster in record["char_clusters"]],
        mention_strings=[list(strings) for strings in record["mention_strings"]],
    )


def result_from_jsonlines(document: Mapping[str, Any]) -> CorefResult:
    """A ``CorefResult`` for a predicted Joshi-format document that has its words (the ``tokens`` field)."""
    if "tokens" not in document:
        raise KeyError(
            f"document {document.get('doc_key')!r} has no 'tokens' field (the words); "
            f"write it with `coref-pipeline minimize` (without --no-tokens) or give --gold-conll"
        )
    words = document["tokens"]
    sentence_of_word = [0] * len(words)
    position = 0
    for segment in document["sentences"]:
        for inner in range(position + 1, position + len(segment) - 1):  # not [CLS] / [SEP]
            sentence_of_word[document["subtoken_map"][inner]] = document["sentence_map"][inner]
        position += len(segment)
    sentences: list[list[str]] = []
    for index, word in enumerate(words):
        if index == 0 or sentence_of_word[index] != sentence_of_word[index - 1]:
            sentences.append([])
        sentences[-1].append(word)
    split = join_words(sentences, f"document {document['doc_key']!r}")
    return result_from_split(document["doc_key"], split, word_clusters(document), dict(document))
