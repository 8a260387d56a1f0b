"""The spaCy 3 component: ``nlp.add_pipe("coref_pipeline", config={"model": DIR})``.

spaCy finds the factory by its entry point (``spacy_factories`` in pyproject.toml), so no import is
needed. ``model`` is a model directory or a Hugging Face Hub id (``owner/name``; ``revision`` pins a branch, tag or
commit). The component reads spaCy's own tokens as the words (no second tokenisation; whitespace
tokens are left out) and the doc's sentences where a component set them (a ``sentencizer``, a
parser), else the project's sentence splitter on the doc's text. It writes each cluster as a
``SpanGroup`` under ``doc.spans["coref_clusters_1"]``, ``..._2``, ... (spaCy's convention) and the
clusters as lists of ``Span`` on ``doc._.coref_clusters``.

The model is loaded on first use. ``nlp.to_disk`` copies the model directory into the pipeline's
folder (``coref_pipeline/model``), and ``spacy.load`` of that folder reads it from there: a saved
pipeline does not depend on where the model was.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

from spacy.language import Language
from spacy.tokens import Doc, Span, SpanGroup
from spacy.util import minibatch

from coref_pipeline.files import atomic_directory
from coref_pipeline.formats.text import sentence_spans
from coref_pipeline.models.directory import resolve_model_directory
from coref_pipeline.serving.coref_model import CorefModel

FACTORY = "coref_pipeline"
CLUSTER_KEY_PREFIX = "coref_clusters_"  # doc.spans keys, numbered from 1 (spaCy's coref component's)
EXTENSION = "coref_clusters"  # doc._.coref_clusters: list[list[Span]]
MODEL_FOLDER = "model"  # the copied model directory inside the component's to_disk folder

if not Doc.has_extension(EXTENSION):
    Doc.set_extension(EXTENSION, default=None)


@Language.factory(
    FACTORY,
    default_config={"model": None, "revision": None, "device": "cpu", "precision": "32", "genre": "nw"},
    assigns=[f"doc._.{EXTENSION}", "doc.spans"],
)
def make_coref_component(
    nlp: Language, name: str, model: str | None, revision: str | None, device: str, precision: str, genre: str
) -> CorefComponent:
    """The component over a model directory or Hub id (``model``, at ``revision``); ``device``, ``precision`` as
    ``CorefModel.load``'s."""
    return CorefComponent(nlp, name, model, device, precision, genre, revision)


class CorefComponent:
    """Clusters of each doc from a coref-pipeline model (baseline or incremental)."""

    def __init__(
        self,
        nlp: Language,
        name: str,
        model: str | None,
        device: str = "cpu",
        precision: str = "32",
        genre: str = "nw",
        revision: str | None = None,
    ) -> None:
        self.name = name
        self.model_path = model
        self.revision = revision
        self.device = device
        self.precision = precision
        self.genre = genre
        self._model: CorefModel | None = None

    @property
    def coref_model(self) -> CorefModel:
        """The model, loaded on first use. (Not ``model``: spaCy reads a component's ``model`` as its Thinc model
        when it links components, which would load it at ``add_pipe`` and ``spacy.load``.)"""
        if self._model is None:
            if not self.model_path:
                raise ValueError(f'{self.name}: no model; add it with config={{"model": "path/to/model_directory"}}')
            self._model = CorefModel.load(
                self.model_path,
                device=self.device,
                precision=self.precision,
                revision=self.revision,
                for_prediction=True,
            )
        return self._model

    def __call__(self, doc: Doc) -> Doc:
        tokens, sentences = self._words(doc)
        clusters = self.coref_model.predict(sentences, genre=self.genre, doc_key=self.name).clusters if tokens else []
        self._set_clusters(doc, tokens, clusters)
        return doc

    def pipe(self, docs: Iterable[Doc], batch_size: int = 32) -> Iterator[Doc]:
        """The docs in batches of ``batch_size`` (spaCy's ``nlp.pipe`` passes it), each batch predicted together
        (``CorefModel.predict_many``: short documents grouped in the encoder's passes, up to the device's budget),
        yielded in their order; in fp32 (the component's default) the clusters of ``__call__`` on each doc."""
        for batch in minibatch(docs, size=batch_size):
            words = [self._words(doc) for doc in batch]
            records = [{"sentences": sentences, "doc_key": self.name} for tokens, sentences in words if tokens]
            results = self.coref_model.predict_many(records, genre=self.genre, progress=False) if records else None
            for doc, (tokens, _) in zip(batch, words, strict=True):
                self._set_clusters(doc, tokens, next(results).clusters if tokens else [])
                yield doc

    @staticmethod
    def _words(doc: Doc) -> tuple[list[int], list[list[str]]]:
        """The indices of the doc's non-whitespace tokens and their texts as sentences: the doc's own sentences
        where a component set them, else the project's splitter's on ``doc.text``."""
        if doc.has_annotation("SENT_START"):
            groups = [[token for token in sentence if not token.is_space] for sentence in doc.sents]
        else:  # each token joins the first sentence that ends after its first character
            ends = [end for _, end in sentence_spans(doc.text)]
            groups, index = [[] for _ in ends], 0
            for token in (token for token in doc if not token.is_space):
                while index + 1 < len(ends) and token.idx >= ends[index]:
                    index += 1
                groups[index].append(token)
        groups = [group for group in groups if group]
        return [token.i for group in groups for token in group], [[token.text for token in group] for group in groups]

    @staticmethod
    def _set_clusters(doc: Doc, tokens: list[int], clusters: list[list[tuple[int, int]]]) -> None:
        for key in [key for key in doc.spans if key.startswith(CLUSTER_KEY_PREFIX)]:
            del doc.spans[key]
        spans = [[Span(doc, tokens[start], tokens[end] + 1) for start, end in cluster] for cluster in clusters]
        for number, cluster in enumerate(spans, start=1):
            doc.spans[f"{CLUSTER_KEY_PREFIX}{number}"] = SpanGroup(
                doc, name=f"{CLUSTER_KEY_PREFIX}{number}", spans=cluster
            )
        doc._.set(EXTENSION, spans)

    def to_disk(self, path: str | Path, *, exclude: Iterable[str] = ()) -> None:
        """The model directory copied into ``path/model``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if self.model_path:
            source = resolve_model_directory(self.model_path, self.revision)
            if source.resolve() != (path / MODEL_FOLDER).resolve():
                with atomic_directory(path / MODEL_FOLDER) as folder:  # whole or not at all, as every write
                    shutil.copytree(source, folder, dirs_exist_ok=True)

    def from_disk(self, path: str | Path, *, exclude: Iterable[str] = ()) -> CorefComponent:
        """The model from ``path/model`` (what ``to_disk`` wrote), loaded on first use."""
        copied = Path(path) / MODEL_FOLDER
        if copied.is_dir():
            self.model_path, self.revision = str(copied), None
            self._model = None
        return self

    def __repr__(self) -> str:
        return f"CorefComponent(model={self.model_path!r})"
