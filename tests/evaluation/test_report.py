"""evaluate_predictions: the evaluate pipeline's work on one model and split."""

from __future__ import annotations

import pytest

from coref_pipeline.config_base import ConfigError
from coref_pipeline.evaluation.report import EvaluateSettings, evaluate_predictions
from coref_pipeline.formats.conll import ConllFile, parse_conll_lines
from coref_pipeline.formats.corpus import preprocess_corpus
from coref_pipeline.formats.segmentation import segment_words
from tests.paths import FIXTURES

SETTINGS = EvaluateSettings(metrics=("muc", "bcub", "ceafe", "lea"), genres=("bc", "nw"))


@pytest.fixture
def gold_and_documents(minilm_tokenizer):
    gold = ConllFile.read(FIXTURES / "tiny.v4_gold_conll")
    documents = segment_words(preprocess_corpus(gold), minilm_tokenizer, [16], include_tokens=True)[16]
    return gold, documents


def test_gold_as_predictions_scores_100(gold_and_documents):
    gold, documents = gold_and_documents
    predictions = [{**d, "predicted_clusters": d["clusters"]} for d in documents]
    report = evaluate_predictions(predictions, gold, SETTINGS)
    assert report.metrics == {"conll_f1": 100.0, "muc_f1": 100.0, "bcub_f1": 100.0, "ceafe_f1": 100.0, "lea_f1": 100.0}
    assert report.scores["lea_recall"] == 100.0 and report.scores["documents"] == 1
    assert report.scores["counts"]["metrics"]["muc"]["recall_den"] == 2  # two links in the gold
    [document] = parse_conll_lines(report.response.splitlines(), min_columns=1)
    assert {frozenset(c) for c in document.clusters} == {frozenset({(0, 1), (3, 3)}), frozenset({(3, 4), (6, 6)})}
    assert report.response.splitlines()[0] == gold.text.splitlines()[0]
    table, breakdown = report.documents, report.breakdown
    assert table["doc_key"].tolist() == ["bc/tiny/00/tiny_0000_0"] and table["genre"].tolist() == ["bc"]
    row = breakdown[(breakdown.category == "length") & (breakdown.group == "0-128")]
    assert row["documents"].item() == 1 and row["conll_f1"].item() == pytest.approx(1.0)
    assert report.f1_by_length.axes[0].get_ylabel() == "CoNLL F1 (%)"


def test_no_predicted_clusters_scores_0_and_a_missing_document_is_an_error(gold_and_documents):
    gold, documents = gold_and_documents
    predictions = [{**d, "predicted_clusters": []} for d in documents]
    report = evaluate_predictions(predictions, gold, SETTINGS)
    assert report.scores["muc_recall"] == 0.0 and report.metrics["muc_f1"] == 0.0
    with pytest.raises(KeyError, match="no predicted clusters for document"):
        evaluate_predictions([], gold, SETTINGS)


def test_settings_are_checked():
    with pytest.raises(ConfigError, match=r"evaluate key 'metrics': unknown metric\(s\) bleu"):
        EvaluateSettings.from_dict({"metrics": ["muc", "bleu"]})
    with pytest.raises(ConfigError, match=r"evaluate key 'remove_singletons': 'no' is not true or false"):
        EvaluateSettings.from_dict({"remove_singletons": "no"})
    with pytest.raises(ConfigError, match=r"unknown evaluate key\(s\) \['metric'\]"):
        EvaluateSettings.from_dict({"metric": ["muc"]})
