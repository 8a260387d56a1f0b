"""Trained models in use: ``CorefModel.load(DIR).predict(text)``.

``predict`` takes raw text, a list of words or a list of sentences (lists of words) and
returns a ``CorefResult``: the words, the sentences and the clusters as word spans,
character spans into the given text and mention strings. ``predict_many`` streams
many documents with a progress bar. ``predict_documents`` runs on Joshi-format
jsonlines (subtoken spans), as the pipelines do.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from coref_pipeline.models.baseline import BaselineCorefModel, predicted_clusters
from coref_pipeline.models.config import BaselineConfig, IncrementalConfig
from coref_pipeline.models.document import DocumentTensors, tensorize
from coref_pipeline.models.encoder import SegmentEncoder
from coref_pipeline.models.incremental import IncrementalCorefModel
from coref_pipeline.models.serialization import load_model_directory, save_model_directory
from coref_pipeline.segmentation import SpecialTokens, segment_document, tokenize_documents
from coref_pipeline.text import SplitText, join_words, split_text

logger = logging.getLogger(__name__)


class DocumentTooLongError(ValueError):
    """A document longer than the baseline's ``max_inference_subtokens``."""


DEFAULT_SPEAKER = "-"  # the CoNLL-2012 files' "no speaker"

# What ``predict`` takes: raw text, a list of words, or a list of sentences (lists of words).
DocumentInput = str | Sequence[str] | Sequence[Sequence[str]]
# Speakers: one for the whole document, one per sentence, or one per word (nested as the sentences).
SpeakersInput = str | Sequence[str] | Sequence[Sequence[str]] | None


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
        from coref_pipeline.visualize import HtmlView

        return HtmlView([self])._repr_html_()


MODEL_TYPES = {
    "baseline": (BaselineConfig, BaselineCorefModel),
    "incremental": (IncrementalConfig, IncrementalCorefModel),
}


@dataclass
class CorefModel:
    """A model with its tokenizer and configuration, as stored in a model directory."""

    model_type: str  # "baseline" or "incremental"
    model: BaselineCorefModel | IncrementalCorefModel
    tokenizer: Any

    @property
    def config(self) -> BaselineConfig | IncrementalConfig:
        return self.model.config

    def save(self, directory: str | Path) -> None:
        save_model_directory(directory, self.model, self.model_type, self.config.to_dict(), self.tokenizer)

    @classmethod
    def load(cls, directory: str | Path, max_inference_subtokens: int | None = None) -> CorefModel:
        """Load a model directory written by ``save`` (safetensors and JSON only, no network).

        The directory says which model it holds (``coref_config.json``).
        ``max_inference_subtokens`` replaces the baseline's length limit (the
        incremental model has none).
        """
        model_type, model_config, encoder_config, state_dict, tokenizer = load_model_directory(directory)
        if model_type not in MODEL_TYPES:
            raise ValueError(f"{directory} holds a {model_type!r} model; known models: {sorted(MODEL_TYPES)}")
        config_class, model_class = MODEL_TYPES[model_type]
        config = config_class.from_dict(model_config)
        if max_inference_subtokens is not None and model_type == "baseline":
            config = dataclasses.replace(config, max_inference_subtokens=max_inference_subtokens)
        model = model_class(config, SegmentEncoder.from_config(encoder_config))
        model.load_state_dict(state_dict)
        model.eval()
        return cls(model_type, model, tokenizer)

    def tensorize(self, document: dict[str, Any]) -> DocumentTensors:
        config = self.config
        return tensorize(
            document,
            self.tokenizer,
            config.max_segment_len,
            config.genres,
            config.default_genre,
            config.max_num_speakers,
        )

    def predict_tensors(self, tensors: DocumentTensors) -> list[list[tuple[int, int]]]:
        """Predicted subtoken clusters of one document."""
        if self.model_type == "incremental":
            return self._forward_for_inference(tensors).clusters
        if tensors.num_tokens > self.config.max_inference_subtokens:
            raise DocumentTooLongError(
                f"document {tensors.doc_key!r} has {tensors.num_tokens} subtokens, more than the baseline's "
                f"limit max_inference_subtokens={self.config.max_inference_subtokens} (its memory grows with "
                f"the square of the length); use the incremental model (data/06_models/incremental), whose "
                f"memory does not grow with length, or raise the limit: "
                f"CorefModel.load(DIR, max_inference_subtokens=N), coref-pipeline predict --max-subtokens N"
            )
        output = self._forward_for_inference(tensors)
        return predicted_clusters(
            output.top_span_starts, output.top_span_ends, output.top_antecedents, output.top_antecedent_scores
        )

    def _forward_for_inference(self, tensors: DocumentTensors) -> Any:
        """The model's output in evaluation mode without gradients."""
        with self._evaluation_mode():
            return self.model(tensors)

    @contextmanager
    def _evaluation_mode(self) -> Iterator[None]:
        """Evaluation mode without gradients; the previous mode is restored, even on error."""
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                yield
        finally:
            self.model.train(was_training)

    def predict_documents(
        self, documents: Iterable[dict[str, Any]], progress: bool = True, total: int | None = None
    ) -> list[dict[str, Any]]:
        """Each jsonlines document with ``predicted_clusters`` added (subtoken spans)."""
        documents = tqdm(documents, total=total, desc="predict", unit="doc", disable=not progress)
        return [self.predict_jsonlines(document) for document in documents]

    def predict_jsonlines(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """One jsonlines document with ``predicted_clusters`` added (subtoken spans)."""
        clusters = self.predict_tensors(self.tensorize(document))
        return {**document, "predicted_clusters": [[list(span) for span in cluster] for cluster in clusters]}

    # ------------------------------------------------------------ raw text
    def predict(
        self,
        document: DocumentInput,
        speakers: SpeakersInput = None,
        genre: str = "nw",
        doc_key: str = "document",
    ) -> CorefResult:
        """Clusters of one document: raw text, a list of words, or a list of sentences (lists of words).

        Raw text is split into sentences and words offline (``coref_pipeline.text``);
        character offsets point into the given string. ``speakers``: one name for the
        whole document, one per sentence, or one per word (nested as the sentences);
        ``None`` is the CoNLL files' "-". ``genre``: one of the model's genres (OntoNotes:
        bc, bn, mz, nw, pt, tc, wb). An empty or whitespace-only document gives an
        empty result without running the model.
        """
        split = as_split_text(document, doc_key)
        jsonlines = self.jsonlines_document(split, speakers, genre, doc_key)
        if jsonlines is None:
            return result_from_split(doc_key, split, [], None)
        predicted = self.predict_jsonlines(jsonlines)
        clusters = word_clusters(predicted)
        return result_from_split(doc_key, split, clusters, predicted)

    def predict_many(
        self,
        documents: Iterable[DocumentInput | Mapping[str, Any]],
        genre: str = "nw",
        progress: bool = True,
        total: int | None = None,
    ) -> Iterator[CorefResult]:
        """``predict`` on each document in turn, yielded as it is done, with a progress bar.

        An item is what ``predict`` takes, or a record ``{"text": ...}`` or
        ``{"sentences": [[...]]}`` (or ``{"words": [...]}``) with optional ``speakers``,
        ``genre`` and ``doc_key``. Documents without a ``doc_key`` are numbered from 0.
        """
        if total is None and hasattr(documents, "__len__"):
            total = len(documents)  # type: ignore[arg-type]
        items = tqdm(documents, total=total, desc="predict", unit="doc", disable=not progress)
        for index, item in enumerate(items):
            if isinstance(item, Mapping):
                content, options = record_content(item, f"document {index}")
                yield self.predict(
                    content,
                    speakers=options.get("speakers"),
                    genre=options.get("genre", genre),
                    doc_key=str(options.get("doc_key", index)),
                )
            else:
                yield self.predict(item, genre=genre, doc_key=str(index))

    def jsonlines_document(
        self, split: SplitText, speakers: SpeakersInput, genre: str, doc_key: str
    ) -> dict[str, Any] | None:
        """The model's jsonlines input for a split text (no gold clusters); ``None`` if it has no words."""
        config = self.config
        if genre not in config.genres:
            raise ValueError(f"document {doc_key!r}: genre {genre!r} is not one of the model's {list(config.genres)}")
        if not split.words:
            return None
        word_speakers = speakers_per_word(speakers, split, doc_key)
        [tokenized] = tokenize_documents([list(split.words)], self.tokenizer)
        return segment_document(
            f"{genre}/{doc_key}",  # the model reads the genre from the key's first two letters
            tokenized,
            split.sentence_ids,
            word_speakers,
            pos=[],
            clusters=[],
            max_segment_len=config.max_segment_len,
            special=SpecialTokens.from_tokenizer(self.tokenizer),
        )

    def span_representations(self, result: CorefResult) -> tuple[np.ndarray, np.ndarray]:
        """The span representation g (``[h_start; h_end; width; head]``) of each predicted mention.

        Returns ``embeddings [num_mentions, span_dim]`` and each mention's cluster index
        ``[num_mentions]``, mentions in the order of ``result.clusters``.
        """
        mentions = [(index, span) for index, cluster in enumerate(result.clusters) for span in cluster]
        if not mentions or result.document is None:
            return np.zeros((0, self.model.span_scorer.span_dim), dtype=np.float32), np.zeros(0, dtype=np.int64)
        tensors = self.tensorize(result.document)
        subtoken_map = torch.tensor(result.document["subtoken_map"])  # [n]
        first_subtoken = torch.full((len(result.words),), -1, dtype=torch.long)  # [num_words]
        last_subtoken = torch.full((len(result.words),), -1, dtype=torch.long)  # [num_words]
        positions = torch.arange(subtoken_map.shape[0])
        first_subtoken[subtoken_map[tensors.word_start]] = positions[tensors.word_start]
        last_subtoken[subtoken_map[tensors.word_end]] = positions[tensors.word_end]
        starts = first_subtoken[[start for _, (start, _) in mentions]]  # [num_mentions]
        ends = last_subtoken[[end for _, (_, end) in mentions]]  # [num_mentions]
        ends = torch.minimum(ends, starts + self.config.max_span_width - 1)
        scorer = self.model.span_scorer
        with self._evaluation_mode():
            hidden = self.model.encoder(tensors.input_ids, tensors.attention_mask)  # [n, H]
            width_features = scorer.width_features(starts, ends)  # [num_mentions, F]
            embeddings = scorer.span_embeddings(hidden, starts, ends, width_features)  # [num_mentions, D]
        cluster_ids = np.array([index for index, _ in mentions], dtype=np.int64)
        return embeddings.numpy(), cluster_ids


def word_clusters(document: dict[str, Any], key: str = "predicted_clusters") -> list[list[tuple[int, int]]]:
    """A document's subtoken clusters mapped to word spans through ``subtoken_map``."""
    from coref_pipeline.evaluation.predictions import subtoken_to_word_clusters

    return subtoken_to_word_clusters(document[key], document["subtoken_map"])


def score_predictions(
    documents: Sequence[dict[str, Any]], remove_singletons: bool, metrics: Sequence[str] = ("muc", "bcub", "ceafe")
):
    """Score ``predicted_clusters`` against the gold ``clusters`` of jsonlines documents (word level)."""
    from coref_pipeline.evaluation.scoring import score_documents

    key = {document["doc_key"]: word_clusters(document, "clusters") for document in documents}
    response = {document["doc_key"]: word_clusters(document) for document in documents}
    return score_documents(key, response, metrics, remove_singletons=remove_singletons)


def dev_metrics(predictions: Sequence[dict[str, Any]], remove_singletons: bool) -> dict[str, float]:
    """CoNLL F1 and MUC, B3, CEAF-e recall, precision and F1 (percent, 4 decimals) of predictions."""
    scores = score_predictions(predictions, remove_singletons)
    metrics = {"conll_f1": round(100 * scores.conll_f1, 4)}
    for name in ("muc", "bcub", "ceafe"):
        counts = scores[name]
        metrics.update(
            {
                f"{name}_recall": round(100 * counts.recall, 4),
                f"{name}_precision": round(100 * counts.precision, 4),
                f"{name}_f1": round(100 * counts.f1, 4),
            }
        )
    return metrics


def as_split_text(document: DocumentInput, doc_key: str = "document") -> SplitText:
    """Raw text split into sentences and words; a list of words (one sentence) or of sentences as given."""
    if isinstance(document, str):
        return split_text(document)
    if isinstance(document, SplitText):
        return document
    if not isinstance(document, Sequence):
        raise TypeError(
            f"document {doc_key!r}: predict takes a str, a list of words or a list of sentences, "
            f"got {type(document).__name__}"
        )
    if all(isinstance(item, str) for item in document):
        return join_words([list(document)] if document else [], f"document {doc_key!r}")
    if all(isinstance(item, Sequence) and not isinstance(item, str) for item in document):
        return join_words(document, f"document {doc_key!r}")
    raise TypeError(f"document {doc_key!r}: a list that mixes words and sentences; give one or the other")


def record_content(record: Mapping[str, Any], where: str) -> tuple[DocumentInput, dict[str, Any]]:
    """The document and the options (``speakers``, ``genre``, ``doc_key``) of an input record."""
    kinds = [key for key in ("text", "sentences", "words") if key in record]
    if len(kinds) != 1:
        raise ValueError(f"{where}: a record needs exactly one of 'text', 'sentences', 'words'; has {sorted(record)}")
    known = {kinds[0], "speakers", "genre", "doc_key"}
    unknown = sorted(set(record) - known)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; a record has {sorted(known)}")
    content = record[kinds[0]]
    if kinds[0] == "text" and not isinstance(content, str):
        raise ValueError(f"{where}: 'text' must be a string, got {type(content).__name__}")
    if kinds[0] == "sentences" and (not isinstance(content, list) or not all(isinstance(s, list) for s in content)):
        raise ValueError(f"{where}: 'sentences' must be a list of lists of words")
    if kinds[0] == "words" and (not isinstance(content, list) or not all(isinstance(w, str) for w in content)):
        raise ValueError(f"{where}: 'words' must be a list of strings")
    return content, {key: record[key] for key in ("speakers", "genre", "doc_key") if key in record}


def speakers_per_word(speakers: SpeakersInput, split: SplitText, doc_key: str) -> list[str]:
    """One speaker per word from one per document, per sentence or per word (nested as the sentences)."""
    num_words, sentences = len(split.words), split.sentences
    if speakers is None:
        return [DEFAULT_SPEAKER] * num_words
    if isinstance(speakers, str):
        return [speakers] * num_words
    speakers = list(speakers)
    if all(isinstance(speaker, str) for speaker in speakers) and len(speakers) == len(sentences):
        return [speaker for speaker, sentence in zip(speakers, sentences, strict=True) for _ in sentence]
    nested_lengths = [len(item) if isinstance(item, list | tuple) else None for item in speakers]
    if nested_lengths == [len(sentence) for sentence in sentences]:
        return [str(speaker) for item in speakers for speaker in item]
    raise ValueError(
        f"document {doc_key!r}: speakers must be one string, one per sentence ({len(sentences)} sentences) "
        f"or one per word nested as the sentences; got {len(speakers)} items"
    )


def result_from_split(
    doc_key: str, split: SplitText, clusters: Sequence[Sequence[tuple[int, int]]], document: dict[str, Any] | None
) -> CorefResult:
    """A ``CorefResult`` from word-level clusters: sorted, with character spans and mention strings.

    A cluster left with fewer than two mentions (two subtoken spans of the same
    words) is not a coreference cluster and is left out.
    """
    distinct = (sorted({(int(start), int(end)) for start, end in cluster}) for cluster in clusters)
    ordered = sorted((cluster for cluster in distinct if len(cluster) >= 2), key=lambda cluster: cluster[0])
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
