"""The spaCy component: spaCy's tokens as the words, its sentences or the project's, clusters as SpanGroups."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

spacy = pytest.importorskip("spacy", reason="the spaCy component needs the spacy extra (pip install -e '.[spacy]')")

from coref_pipeline.serving.coref_model import CorefModel  # noqa: E402
from tests.models.tiny import save_tiny_models  # noqa: E402
from tests.serving.encoder_passes import (  # noqa: E402
    assert_same_where_read_the_same,
    batched_as_one_at_a_time,
    counted_encoder_passes,
)

TEXT = (
    "Ada wrote a note to Charles. She sent it in the morning, and he read it twice.\n\n"
    "He smiled at her. The engine was ready, so she showed it to him."
)
TEXTS = [f"Person {n} met Ada. She gave him the letter, and he thanked her for it. They left." for n in range(20)]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    return save_tiny_models(tmp_path_factory.mktemp("models"))


def pipeline(model_dir, sentencizer: bool):
    nlp = spacy.blank("en")
    if sentencizer:
        nlp.add_pipe("sentencizer")
    nlp.add_pipe("coref_pipeline", config={"model": str(model_dir)})
    return nlp


def token_clusters(doc) -> list[list[tuple[int, int]]]:
    return [[(span.start, span.end - 1) for span in cluster] for cluster in doc._.coref_clusters]


def words_and_tokens(doc) -> tuple[list[str], list[int]]:
    tokens = [token for token in doc if not token.is_space]
    return [token.text for token in tokens], [token.i for token in tokens]


@pytest.mark.parametrize("model", [0, 1], ids=["baseline", "incremental"])
def test_with_a_sentencizer_the_clusters_are_predicts_on_the_docs_words_and_sentences(model_dirs, model):
    doc = pipeline(model_dirs[model], sentencizer=True)(TEXT)
    sentences = [[token.text for token in sentence if not token.is_space] for sentence in doc.sents]
    expected = CorefModel.load(model_dirs[model]).predict([s for s in sentences if s]).clusters
    _, tokens = words_and_tokens(doc)  # word i of the prediction is the i-th token that is not whitespace
    assert token_clusters(doc) == [[(tokens[start], tokens[end]) for start, end in cluster] for cluster in expected]
    assert expected, "the tiny model predicts no cluster on this text: the comparison would be empty"
    # spaCy's conventions: one SpanGroup per cluster, numbered from 1, and the clusters on the doc.
    assert sorted(doc.spans) == sorted(f"coref_clusters_{n}" for n in range(1, len(expected) + 1))
    assert [[span.text for span in doc.spans[f"coref_clusters_{n + 1}"]] for n in range(len(expected))] == [
        [span.text for span in cluster] for cluster in doc._.coref_clusters
    ]


def test_without_sentences_the_projects_splitter_sentences_spacys_words(model_dirs):
    doc = pipeline(model_dirs[0], sentencizer=False)(TEXT)
    words, tokens = words_and_tokens(doc)
    result = CorefModel.load(model_dirs[0]).predict(TEXT)  # the project's own splitter, words and sentences
    assert words == result.words  # on this text spaCy's tokens are the project's words: the same input
    assert token_clusters(doc) == [
        [(tokens[start], tokens[end]) for start, end in cluster] for cluster in result.clusters
    ]
    assert result.clusters


@pytest.mark.parametrize("sentencizer", [True, False])
def test_pipe_gives_what_one_doc_at_a_time_gives_reading_several_docs_a_pass(model_dirs, sentencizer, monkeypatch):
    nlp = pipeline(model_dirs[1], sentencizer=sentencizer)
    texts = [*TEXTS[:9], " ", *TEXTS[9:]]  # a doc without words among them, in its place
    one_at_a_time = [token_clusters(nlp(text)) for text in texts]
    model = nlp.get_pipe("coref_pipeline").coref_model
    passes = counted_encoder_passes(model, monkeypatch)
    (docs, passes_batched), read_the_same = batched_as_one_at_a_time(
        model, lambda: (list(nlp.pipe(texts, batch_size=6)), len(passes))
    )
    batched = [token_clusters(doc) for doc in docs]
    assert batched[9] == one_at_a_time[9] == [] and any(one_at_a_time)
    assert_same_where_read_the_same(batched[:9] + batched[10:], one_at_a_time[:9] + one_at_a_time[10:], read_the_same)
    assert passes_batched < len(texts) - 1  # several docs' segments a pass (on a CPU, short ones are grouped)


def test_to_disk_and_spacy_load_keep_the_model(model_dirs, tmp_path):
    source = tmp_path / "model"
    shutil.copytree(model_dirs[0], source)
    nlp = pipeline(source, sentencizer=True)
    expected = token_clusters(nlp(TEXT))
    nlp.to_disk(tmp_path / "pipeline")
    shutil.rmtree(source)  # the saved pipeline holds its own copy of the model directory
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.pipe_names == ["sentencizer", "coref_pipeline"]
    assert token_clusters(loaded(TEXT)) == expected and expected


def test_empty_text_and_a_missing_model(model_dirs):
    assert pipeline(model_dirs[0], sentencizer=False)("  \n ")._.coref_clusters == []
    nlp = spacy.blank("en")
    nlp.add_pipe("coref_pipeline")
    with pytest.raises(ValueError, match='no model; add it with config=\\{"model"'):
        nlp("Ada wrote.")


def test_spacy_finds_the_component_by_its_entry_point(model_dirs):
    """A fresh interpreter: no import of coref_pipeline before add_pipe."""
    code = (
        "import spacy; nlp = spacy.blank('en'); "
        f"nlp.add_pipe('coref_pipeline', config={{'model': {str(model_dirs[0])!r}}}); "
        "print(type(nlp.get_pipe('coref_pipeline')).__module__)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "coref_pipeline.serving.spacy_component"
