"""Trained models in use: ``CorefModel.load(DIR).predict(text)``.

``predict`` takes raw text, a list of words or a list of sentences (lists of words) and
returns a :class:`~coref_pipeline.serving.results.CorefResult`: the words, the sentences and the
clusters as word spans, character spans into the given text and mention strings.
``predict(texts=[...])`` and ``predict_many`` predict many documents at once, and ``predict_documents`` runs on
Joshi-format jsonlines (subtoken spans), as the pipelines do: documents grouped by length, the segments of a group
read by the encoder together (``serving.batching``): in fp32 the scores of one at a time within float32's bound
for the reordered sums, so the same clusters but where that rounding tips a near tie; in bf16 a segment padded to
another width rounds otherwise, and a few documents' clusters differ (docs/api.md).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from coref_pipeline.errors import UserError
from coref_pipeline.evaluation.predictions import word_clusters
from coref_pipeline.formats.conll import DEFAULT_GENRE, NO_SPEAKER
from coref_pipeline.formats.corpus import SegmentedCorpus
from coref_pipeline.formats.segmentation import (
    SegmentationMismatchError,
    SegmentationRecord,
    SegmentLength,
    SpecialTokens,
    check_vocabulary,
    segment_document,
    tokenize_documents,
)
from coref_pipeline.formats.text import SplitText, join_words, split_text
from coref_pipeline.models.baseline import BaselineCorefModel, CorefOutput, predicted_clusters
from coref_pipeline.models.config import PRECISIONS, BaselineConfig, ConfigError, IncrementalConfig
from coref_pipeline.models.directory import read_training_record, resolve_model_directory
from coref_pipeline.models.document import DocumentTensors, tensorize
from coref_pipeline.models.encoder import SegmentEncoder
from coref_pipeline.models.incremental import IncrementalCorefModel
from coref_pipeline.models.serialization import (
    ModelDirectoryError,
    build_with_weights,
    load_model_directory,
    save_model_directory,
)
from coref_pipeline.runtime.devices import (
    bound_host_memory,
    keep_host_memory,
    native_bf16,
    resolve_device,
    resolve_precision,
)
from coref_pipeline.runtime.onednn import bound_onednn_caches
from coref_pipeline.serving.batching import default_batch_tokens, head_runs, length_groups, pools
from coref_pipeline.serving.inputs import DocumentInput, InputFormatError, SpeakersInput, record_content
from coref_pipeline.serving.results import CorefResult, result_from_split

logger = logging.getLogger(__name__)


class DocumentTooLongError(UserError, ValueError):
    """A document longer than the baseline's ``max_inference_subtokens``."""


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
    # Inference precision: "32", or "bf16-mixed" / "16-mixed" (autocast; the weights stay fp32), or "auto"
    # (bf16-mixed where the model's device computes bf16 natively, else 32: devices.resolve_precision).
    # Training-time dev evaluation always predicts at "32".
    precision: str = "32"
    # How it was trained (the directory's training.json: preset, steps, time, ...); None for a model not trained
    # by this project's training (built, imported) or saved before the record existed.
    training: dict[str, Any] | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ConfigError(f"inference precision must be one of {list(PRECISIONS)}, got {self.precision!r}")
        self.precision = resolve_precision(self.precision, self.device)
        if self.precision == "bf16-mixed" and self.device.type == "cpu" and native_bf16(self.device) is None:
            logger.warning(
                "precision bf16-mixed on a CPU without native bf16 (AVX512_BF16 or AMX): emulated, slower than fp32 "
                "(--precision 32 or auto is faster here)"
            )
        keep_host_memory()  # large freed tensors reused, not page-faulted in again (devices.keep_host_memory)
        if self.device.type == "cpu":
            bound_onednn_caches()  # oneDNN's per-shape caches held: each document's rows are new shapes

    @property
    def computation(self) -> str:
        """What inference computes in, in words (``predict`` logs it and records it beside its output)."""
        if self.precision == "32":
            return f"fp32 on {self.device}"
        dtype = "bf16" if self.precision == "bf16-mixed" else "fp16"
        if self.device.type == "cpu" and dtype == "bf16":
            return (
                f"{self.precision}: the encoder and the antecedent scorers (coarse and fine) in bf16 (autocast), "
                f"the mention scorer in fp32, on {self.device}"
            )
        if self.device.type == "cpu":
            return f"{self.precision}: the encoder in {dtype} (autocast), the scorers in fp32, on {self.device}"
        return f"{self.precision}: autocast to {dtype} (weights fp32), on {self.device}"

    @property
    def config(self) -> BaselineConfig | IncrementalConfig:
        return self.model.config

    def save(self, directory: str | Path) -> None:
        save_model_directory(
            directory, self.model, self.model_type, self.config.to_dict(), self.tokenizer, self.training
        )

    @classmethod
    def load(
        cls,
        directory: str | Path,
        max_inference_subtokens: int | None = None,
        device: str | torch.device = "cpu",
        precision: str = "32",
        max_top_antecedents: int | None = None,
        min_coarse_score: float | None = None,
        revision: str | None = None,
        for_prediction: bool = False,
    ) -> CorefModel:
        """Load a model directory written by ``save`` (safetensors and JSON only), or a Hub model id
        (``owner/name``, at ``revision``: a branch, tag or commit) through ``huggingface_hub``'s cache
        (``models.directory.resolve_model_directory``; ``HF_HUB_OFFLINE=1`` reads the cache only).

        The directory says which model it holds (``coref_config.json``).
        ``max_inference_subtokens`` replaces the baseline's length limit (the
        incremental model has none). ``device``: ``cpu`` (default), ``auto`` (a GPU
        when there is one), ``cuda``, ``cuda:N`` or ``mps``; one that is absent is a
        :class:`~coref_pipeline.runtime.devices.DeviceError`. ``precision``: ``32`` (default) or
        ``bf16-mixed`` / ``16-mixed``, computed under autocast (on a CPU the encoder and, in bf16, the antecedent
        scorers, the mention scorer in fp32: ``inference_autocast``), or ``auto`` (bf16-mixed where the
        device computes bf16 natively, else 32). With the bf16 encoder ``predict`` reads LitBank test 1.21x and
        OntoNotes-shaped documents 1.19x the documents/s of fp32 on a 2-core AMD EPYC with AVX-512 BF16, F1
        within 0.1 (docs/benchmarks.md, "Throughput of ``predict`` on a CPU").
        ``max_top_antecedents`` (baseline): the antecedents per span kept by the coarse
        score for the fine FFNN at inference, instead of the model's own (50): fewer is
        faster, the fine stage's cost is proportional to it, and may cost F1
        (docs/benchmarks.md measures both on LitBank). ``min_coarse_score``: at inference,
        antecedents (the incremental model's columns) whose coarse score is at most this are not
        scored by the fine FFNN, instead of the model's own setting (None: all are; on LitBank 0
        leaves a third of the baseline's pairs and the same test F1, docs/benchmarks.md); the
        incremental model takes it with ``score: calibrated`` only. ``for_prediction``: a BERT encoder
        computed without importing transformers' model stack (``models/bert.py``: the same values, 2.5 s less
        start-up), as ``predict``, ``serve`` and the spaCy component load; such a model refuses training mode until
        ``model.encoder.make_trainable()`` (the training loop calls it).
        """
        target = resolve_device(device)
        directory = resolve_model_directory(directory, revision)
        model_type, model_config, encoder_config, state_dict, tokenizer = load_model_directory(
            directory, for_prediction
        )
        if model_type not in MODEL_TYPES:
            raise ModelDirectoryError(f"{directory} holds a {model_type!r} model; known models: {sorted(MODEL_TYPES)}")
        config_class, model_class = MODEL_TYPES[model_type]
        if model_type == "incremental" and "score" not in model_config:
            model_config = {**model_config, "score": "paper"}  # saved before the key existed: the paper's form
        config = config_class.from_dict(model_config)
        if max_inference_subtokens is not None and model_type == "baseline":
            config = dataclasses.replace(config, max_inference_subtokens=max_inference_subtokens)
        if max_top_antecedents is not None and model_type != "baseline":
            raise ConfigError(f"max_top_antecedents is a baseline setting; {directory} holds a {model_type!r} model")
        fine_stage = {  # the fine-stage settings given here, replacing the model's own
            name: value
            for name, value in (("max_top_antecedents", max_top_antecedents), ("min_coarse_score", min_coarse_score))
            if value is not None
        }
        config = dataclasses.replace(config, **fine_stage)
        encoder_for = SegmentEncoder.for_inference if for_prediction else SegmentEncoder.from_config
        model = build_with_weights(lambda: model_class(config, encoder_for(encoder_config)), state_dict)
        model.to(target).eval()
        return cls(model_type, model, tokenizer, precision, read_training_record(directory))

    def check_segmentation(
        self, documents: Sequence[Mapping[str, Any]], record: SegmentationRecord | None, source: str
    ) -> None:
        """Refuse jsonlines documents segmented with another tokenizer than the model's.

        ``record`` is the file's :class:`SegmentationRecord` (``segment`` and
        ``minimize`` write one); without it every subtoken must at least be in the
        model's vocabulary.
        """
        config = self.config
        resegment = (
            f"coref-pipeline minimize INPUT.conll {source} --tokenizer {config.tokenizer_name} "
            f"--seg-len {config.segment_length}"
        )
        what = "the model"
        try:
            if record is not None:
                record.check(config.tokenizer_name, self.tokenizer, None, what, resegment)
            else:
                check_vocabulary(documents, self.tokenizer, what, resegment)
        except SegmentationMismatchError as error:
            raise SegmentationMismatchError(f"{source}: {error}") from None

    @property
    def device(self) -> torch.device:
        """Where the model's weights are (and where its inputs go)."""
        return next(self.model.parameters()).device

    def to(self, device: str | torch.device | None) -> CorefModel:
        """Move the model to ``device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``); returns itself."""
        self.model.to(resolve_device(device))
        return self

    def tensorize(self, document: dict[str, Any], max_segment_len: int | None = None) -> DocumentTensors:
        """A jsonlines document as tensors on the model's device.

        ``max_segment_len``: the longest segment accepted (default: the model's own); a longer
        one, up to the encoder's positions, is for reading segments of another length.
        """
        config = self.config
        return tensorize(
            document,
            self.tokenizer,
            max(max_segment_len or config.max_segment_len, config.max_segment_len),
            config.genres,
            config.default_genre,
            config.max_num_speakers,
            device=self.device,
        )

    def predict_tensors(
        self, tensors: DocumentTensors, hidden: torch.Tensor | None = None
    ) -> list[list[tuple[int, int]]]:
        """Predicted subtoken clusters of one document; ``hidden``: its encoder output ``[n, H]`` when it was already
        encoded (batched prediction), else the model encodes it."""
        if self.model_type == "incremental":
            return self._forward_for_inference(tensors, hidden).clusters
        self.check_length(tensors)
        return self._baseline_clusters(self._forward_for_inference(tensors, hidden))

    def _baseline_clusters(self, output: CorefOutput) -> list[list[tuple[int, int]]]:
        """The subtoken clusters of the baseline's output for one document (``predicted_clusters``)."""
        return predicted_clusters(
            output.top_span_starts,
            output.top_span_ends,
            output.top_antecedents,
            output.top_antecedent_scores,
            self.config.overlapping_antecedents,
        )

    def check_length(self, tensors: DocumentTensors) -> None:
        """Refuse a document longer than the baseline's ``max_inference_subtokens`` (the incremental model reads
        any length): a :class:`DocumentTooLongError` naming it and what to do."""
        if self.model_type == "baseline" and tensors.num_tokens > self.config.max_inference_subtokens:
            raise DocumentTooLongError(
                f"document {tensors.doc_key!r} has {tensors.num_tokens} subtokens, more than the baseline's "
                f"limit max_inference_subtokens={self.config.max_inference_subtokens} (its memory grows with "
                f"the square of the length); use the incremental model (data/06_models/incremental), whose "
                f"memory does not grow with length, or raise the limit: "
                f"CorefModel.load(DIR, max_inference_subtokens=N), coref-pipeline predict --max-subtokens N"
            )

    def _forward_for_inference(self, tensors: DocumentTensors, hidden: torch.Tensor | None = None) -> Any:
        """The model's output in evaluation mode without gradients (``hidden``: the document already encoded)."""
        with self._evaluation_mode():
            if self.model_type == "incremental":
                output = self.model(tensors, hidden)
            else:
                output = self.model(tensors, with_loss=False, hidden=hidden)
        bound_host_memory()  # the heap's free part kept for the next document, within a bound
        return output

    def encode_together(self, documents: Sequence[DocumentTensors], max_tokens: int) -> list[torch.Tensor]:
        """The encoder's outputs ``[n_i, H]`` of several documents, their segments read in passes of at most
        ``max_tokens`` subtokens (padding included; at least one segment a pass), in evaluation mode."""
        width = max(max(document.lengths()) for document in documents)
        input_ids = torch.cat([_padded(document.input_ids, width) for document in documents])  # [segments, width]
        attention_mask = torch.cat([_padded(document.attention_mask, width) for document in documents])
        lengths = [length for document in documents for length in document.lengths()]
        with self._evaluation_mode():
            hidden = self.model.encoder(input_ids, attention_mask, lengths, max(1, max_tokens // width))  # [n, H]
        return list(hidden.split([document.num_tokens for document in documents]))

    def predict_tensor_pool(
        self, documents: Sequence[DocumentTensors], max_tokens: int
    ) -> list[list[list[tuple[int, int]]] | UserError]:
        """Each document's predicted subtoken clusters, or the error that refused it (a baseline's document over
        its length limit), in their order: documents grouped by length (``batching.length_groups``), each
        group's segments through the encoder together, then each document read from its own encoder output (the
        group's heads together, the baseline's over documents of about the same length: ``predict_group``).
        A document longer than ``max_tokens`` is predicted as one at a time: its segments through the encoder in
        the model's own passes (the incremental model's segment by segment)."""
        outcomes: list[Any] = [None] * len(documents)
        readable = []
        for index, document in enumerate(documents):
            try:
                self.check_length(document)
                readable.append(index)
            except DocumentTooLongError as error:
                outcomes[index] = error
        for group in length_groups([documents[index].num_tokens for index in readable], max_tokens):
            members = [readable[position] for position in group]
            if len(members) == 1 and documents[members[0]].num_tokens > max_tokens:
                hidden: list[torch.Tensor | None] = [None]  # as one at a time (incremental: a segment at a time)
            else:
                hidden = self.encode_together([documents[index] for index in members], max_tokens)
            runs = [list(range(len(members)))]  # the incremental model: the group's spans read together
            if self.model_type == "baseline":  # the head over documents of about the same length together
                runs = head_runs([documents[index].num_tokens for index in members])
            for run in runs:
                indices, encoded = [members[position] for position in run], [hidden[position] for position in run]
                if len(run) > 1:
                    found = self.predict_group([documents[index] for index in indices], encoded)
                else:
                    found = [self.predict_tensors(documents[indices[0]], encoded[0])]
                for index, clusters in zip(indices, found, strict=True):
                    outcomes[index] = clusters
        return outcomes

    def predict_group(
        self, documents: Sequence[DocumentTensors], hidden: Sequence[torch.Tensor]
    ) -> list[list[list[tuple[int, int]]]]:
        """The subtoken clusters of several documents already encoded (``hidden``: each one's ``[n_i, H]``), the
        model's head run over them together (``forward_group``: the baseline's whole head, the incremental model's
        span scorer): each document's clusters of one at a time but where float32's rounding tips a near tie. Many
        short documents' heads are products of a few rows each, bound by reading the weights, among many small
        operators: together they read the weights and run the operators once a group (docs/benchmarks.md, "Short
        texts: the head, not the encoder")."""
        with self._evaluation_mode():
            outputs = self.model.forward_group(documents, hidden)
        bound_host_memory()
        if self.model_type == "incremental":
            return [output.clusters for output in outputs]
        return [self._baseline_clusters(output) for output in outputs]

    @contextmanager
    def _evaluation_mode(self) -> Iterator[None]:
        """Evaluation mode without gradients; the previous mode is restored, even on error. A model already in
        evaluation mode (as loaded) is left alone: switching walks every module, twice per document."""
        was_training = self.model.training
        if was_training:
            self.model.eval()
        try:
            with torch.no_grad(), self.inference_autocast():
                yield
        finally:
            if was_training:
                self.model.train()

    def inference_autocast(self) -> AbstractContextManager:
        """The inference precision's autocast on the model's device (nothing at 32). On a CPU the encoder and, in
        bf16, the antecedent scorers (the pair scorer's FFNN and the coarse scorer's bilinear term) compute in the
        lower precision, the mention scorer in float32: its many element-wise passes over every candidate span
        were slower under autocast (oneDNN builds a kernel for each new shape), so bf16 for the whole head gave
        the prediction 1.00x of fp32 on LitBank test and 0.80x on OntoNotes-shaped documents; the pair FFNN alone
        in bf16 takes 0.81x (incremental) and 0.93x (baseline) of the time with it in fp32, within 0.1 CoNLL F1,
        and the coarse term in bf16 0.94x again (docs/benchmarks.md, "Throughput of ``predict`` on a CPU")."""
        if self.precision == "32":
            return nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16-mixed" else torch.float16
        if self.device.type == "cpu":
            return self._computing_on_cpu_in(dtype)
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    @contextmanager
    def _computing_on_cpu_in(self, dtype: torch.dtype) -> Iterator[None]:
        pair_scorer = self.model.pair_scorer.computing_in(dtype) if dtype == torch.bfloat16 else nullcontext()
        with self.model.encoder.computing_in(dtype), pair_scorer:
            yield

    def predict_documents(
        self,
        documents: Iterable[dict[str, Any]],
        progress: bool = True,
        total: int | None = None,
        segment_length: int | str | None = None,
        max_tokens_in_batch: int | None = None,
    ) -> list[dict[str, Any]]:
        """Each jsonlines document with ``predicted_clusters`` added (subtoken spans), in their order.

        ``segment_length``: the documents' segment length when it is not the model's (a ``SegmentLength`` label:
        512, "5sent"; see ``corpus_documents``). ``max_tokens_in_batch``: the subtokens of one encoder pass over
        the segments of several documents (``serving.batching``; documents are read ahead from an iterator a few
        budgets at a time); 0 reads one document at a time; None, the device's default (``batch_tokens``). In fp32
        the clusters are the same either way but where float32's rounding tips a near tie, in bf16 not always (the
        module's docstring).
        """
        return list(self.predicted_documents(documents, progress, total, segment_length, max_tokens_in_batch))

    def predicted_documents(
        self,
        documents: Iterable[dict[str, Any]],
        progress: bool = True,
        total: int | None = None,
        segment_length: int | str | None = None,
        max_tokens_in_batch: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        """``predict_documents`` yielded in the documents' order as they are done (a group of them at a time when
        batched), so that a caller can write each before the next is read."""
        max_tokens_in_batch = self.batch_tokens(max_tokens_in_batch)
        max_segment_len = self.readable_segment_len(segment_length)
        if total is None and hasattr(documents, "__len__"):
            total = len(documents)  # type: ignore[arg-type]
        with tqdm(total=total, desc="predict", unit="doc", disable=not progress) as bar:
            if not max_tokens_in_batch:
                for document in documents:
                    yield self.predict_jsonlines(document, max_segment_len)
                    bar.update()
                return
            for pool in pools(documents, _subtokens, max_tokens_in_batch):
                tensors = [self.tensorize(document, max_segment_len) for document in pool]
                for document, outcome in zip(pool, self.predict_tensor_pool(tensors, max_tokens_in_batch), strict=True):
                    if isinstance(outcome, Exception):
                        raise outcome
                    yield {**document, "predicted_clusters": _as_lists(outcome)}
                    bar.update()

    def batch_tokens(self, max_tokens_in_batch: int | None = None) -> int:
        """The encoder budget of batched prediction: ``max_tokens_in_batch`` when given, else the default of the
        model's device (``batching.default_batch_tokens``: 8,192 subtokens on a GPU, 512 on a CPU, where short
        documents grouped gain most)."""
        return default_batch_tokens(self.device.type) if max_tokens_in_batch is None else max_tokens_in_batch

    def readable_segment_len(self, segment_length: int | str | None) -> int:
        """The longest segment accepted from documents segmented at ``segment_length``: the model's
        own length (None), else as many subtokens as the encoder has positions."""
        config = self.config
        if segment_length is None:
            return config.max_segment_len
        length = SegmentLength.parse(segment_length)
        positions = getattr(getattr(self.model.encoder.model, "config", None), "max_position_embeddings", None)
        return max(positions or length.subtokens, config.max_segment_len)

    def corpus_documents(
        self, corpus: SegmentedCorpus, split: str, segment_length: int | str | None = None
    ) -> list[dict[str, Any]]:
        """One split of a segmented corpus at the model's segment length, or at ``segment_length`` (a
        ``SegmentLength`` label: the model may read other lengths, as in Xia et al.'s study); refused if
        segmented for another tokenizer."""
        config = self.config
        length = config.segment_length if segment_length is None else SegmentLength.parse(segment_length).label
        corpus.check_tokenizer(config.tokenizer_name, self.tokenizer, length, "the model")
        return corpus.documents(split, length)

    def predict_corpus(
        self, corpus: SegmentedCorpus, split: str, segment_length: int | str | None = None
    ) -> list[dict[str, Any]]:
        """One split of a segmented corpus with ``predicted_clusters`` (see ``corpus_documents``)."""
        documents = self.corpus_documents(corpus, split, segment_length)
        return self.predict_documents(documents, total=len(documents), segment_length=segment_length)

    def predict_jsonlines(self, document: Mapping[str, Any], max_segment_len: int | None = None) -> dict[str, Any]:
        """One jsonlines document with ``predicted_clusters`` added (subtoken spans); ``max_segment_len``
        as in ``tensorize``."""
        clusters = self.predict_tensors(self.tensorize(document, max_segment_len))
        return {**document, "predicted_clusters": _as_lists(clusters)}

    # ------------------------------------------------------------ raw text
    def predict(
        self,
        document: DocumentInput | None = None,
        speakers: SpeakersInput = None,
        genre: str = DEFAULT_GENRE,
        doc_key: str = "document",
        *,
        texts: Iterable[DocumentInput | Mapping[str, Any]] | None = None,
        max_tokens_in_batch: int | None = None,
    ) -> CorefResult | list[CorefResult]:
        """Clusters of one document: raw text, a list of words, or a list of sentences (lists of words); or, with
        ``texts=[...]`` (a list or an iterator), of many documents at once: a list of results in their order
        (``predict_many``, batched by length under ``max_tokens_in_batch``).

        Raw text is split into sentences and words offline (``coref_pipeline.formats.text``);
        character offsets point into the given string. ``speakers``: one name for the
        whole document, one per sentence, or one per word (nested as the sentences);
        ``None`` is the CoNLL files' "-". ``genre``: one of the model's genres (OntoNotes:
        bc, bn, mz, nw, pt, tc, wb). An empty or whitespace-only document gives an
        empty result without running the model.
        """
        if texts is not None:
            if document is not None:
                raise TypeError("predict takes one document or texts=[...], not both")
            return list(self.predict_many(texts, genre, progress=False, max_tokens_in_batch=max_tokens_in_batch))
        if document is None:
            raise TypeError("predict needs a document (a str, a list of words or of sentences) or texts=[...]")
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
        genre: str = DEFAULT_GENRE,
        progress: bool = True,
        total: int | None = None,
        max_tokens_in_batch: int | None = None,
    ) -> Iterator[CorefResult]:
        """``predict`` on many documents, yielded in their order as they are done, with a progress bar: documents
        read a few budgets ahead, grouped by length, and the segments of a group read by the encoder together
        (``max_tokens_in_batch`` subtokens a pass; 0: one document at a time; None: the device's default,
        ``batch_tokens``). In fp32 the clusters are the same either way but where float32's rounding tips a near
        tie, in bf16 not always (the module's docstring).

        An item is what ``predict`` takes, or a record ``{"text": ...}`` or
        ``{"sentences": [[...]]}`` (or ``{"words": [...]}``) with optional ``speakers``,
        ``genre`` and ``doc_key``. Documents without a ``doc_key`` are numbered from 0.
        """
        if total is None and hasattr(documents, "__len__"):
            total = len(documents)  # type: ignore[arg-type]
        prepared = (self._prepared(item, index, genre) for index, item in enumerate(documents))
        with tqdm(total=total, desc="predict", unit="doc", disable=not progress) as bar:
            budget = self.batch_tokens(max_tokens_in_batch)
            for pool in pools(prepared, lambda item: _subtokens(item[2]) if item[2] else 0, max(budget, 1)):
                readable = [item for item in pool if item[2] is not None]
                if budget:
                    tensors = [self.tensorize(item[2]) for item in readable]
                    outcomes = iter(self.predict_tensor_pool(tensors, budget))
                for doc_key, split, jsonlines in pool:
                    if jsonlines is None:
                        yield result_from_split(doc_key, split, [], None)
                    else:
                        outcome = next(outcomes) if budget else self.predict_tensors(self.tensorize(jsonlines))
                        if isinstance(outcome, Exception):
                            raise outcome
                        predicted = {**jsonlines, "predicted_clusters": _as_lists(outcome)}
                        yield result_from_split(doc_key, split, word_clusters(predicted), predicted)
                    bar.update()

    def _prepared(
        self, item: DocumentInput | Mapping[str, Any], index: int, genre: str
    ) -> tuple[str, SplitText, dict[str, Any] | None]:
        """An item of ``predict_many`` as its key, its split text and its jsonlines document (None: no words)."""
        if isinstance(item, Mapping):
            content, options = record_content(item, f"document {index}")
            doc_key = str(options.get("doc_key", index))
            split = as_split_text(content, doc_key)
            return (
                doc_key,
                split,
                self.jsonlines_document(split, options.get("speakers"), options.get("genre", genre), doc_key),
            )
        split = as_split_text(item, str(index))
        return str(index), split, self.jsonlines_document(split, None, genre, str(index))

    def jsonlines_document(
        self, split: SplitText, speakers: SpeakersInput, genre: str, doc_key: str
    ) -> dict[str, Any] | None:
        """The model's jsonlines input for a split text (no gold clusters); ``None`` if it has no words."""
        config = self.config
        if genre not in config.genres:
            raise InputFormatError(
                f"document {doc_key!r}: genre {genre!r} is not one of the model's {list(config.genres)}"
            )
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
            max_sentences=config.segment_sentences,
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
        device = self.device
        subtoken_map = torch.tensor(result.document["subtoken_map"], device=device)  # [n]
        first_subtoken = torch.full((len(result.words),), -1, dtype=torch.long, device=device)  # [num_words]
        last_subtoken = torch.full((len(result.words),), -1, dtype=torch.long, device=device)  # [num_words]
        positions = torch.arange(subtoken_map.shape[0], device=device)
        first_subtoken[subtoken_map[tensors.word_start]] = positions[tensors.word_start]
        last_subtoken[subtoken_map[tensors.word_end]] = positions[tensors.word_end]
        starts = first_subtoken[torch.tensor([start for _, (start, _) in mentions], device=device)]  # [num_mentions]
        ends = last_subtoken[torch.tensor([end for _, (_, end) in mentions], device=device)]  # [num_mentions]
        ends = torch.minimum(ends, starts + self.config.max_span_width - 1)
        scorer = self.model.span_scorer
        with self._evaluation_mode():
            hidden = self.model.encoder(tensors.input_ids, tensors.attention_mask)  # [n, H]
            width_features = scorer.width_features(starts, ends)  # [num_mentions, F]
            embeddings = scorer.span_embeddings(hidden, starts, ends, width_features)  # [num_mentions, D]
        cluster_ids = np.array([index for index, _ in mentions], dtype=np.int64)
        return embeddings.float().cpu().numpy(), cluster_ids


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


def speakers_per_word(speakers: SpeakersInput, split: SplitText, doc_key: str) -> list[str]:
    """One speaker per word from one per document, per sentence or per word (nested as the sentences)."""
    num_words, sentences = len(split.words), split.sentences
    if speakers is None:
        return [NO_SPEAKER] * num_words
    if isinstance(speakers, str):
        return [speakers] * num_words
    speakers = list(speakers)
    if all(isinstance(speaker, str) for speaker in speakers) and len(speakers) == len(sentences):
        return [speaker for speaker, sentence in zip(speakers, sentences, strict=True) for _ in sentence]
    nested_lengths = [len(item) if isinstance(item, list | tuple) else None for item in speakers]
    if nested_lengths == [len(sentence) for sentence in sentences]:
        return [str(speaker) for item in speakers for speaker in item]
    raise InputFormatError(
        f"document {doc_key!r}: speakers must be one string, one per sentence ({len(sentences)} sentences) "
        f"or one per word nested as the sentences; got {len(speakers)} items"
    )


def _subtokens(document: Mapping[str, Any]) -> int:
    """A jsonlines document's subtokens, [CLS] and [SEP] included."""
    return sum(len(segment) for segment in document["sentences"])


def _as_lists(clusters: Sequence[Sequence[tuple[int, int]]]) -> list[list[list[int]]]:
    return [[list(span) for span in cluster] for cluster in clusters]


def _padded(rows: torch.Tensor, width: int) -> torch.Tensor:
    """``[segments, w]`` ids or mask, zero-padded (or cut) to ``[segments, width]``."""
    if rows.shape[1] >= width:
        return rows[:, :width]
    return torch.nn.functional.pad(rows, (0, width - rows.shape[1]))
