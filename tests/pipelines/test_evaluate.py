"""Nodes of the evaluate pipeline."""

from __future__ import annotations

import pytest

from coref_pipeline.conll import parse_conll_lines
from coref_pipeline.datasets import ConllFileDataset
from coref_pipeline.pipelines.evaluate.nodes import evaluate_predictions
from coref_pipeline.pipelines.evaluate.pipeline import create_pipeline
from coref_pipeline.pipelines.preprocess.nodes import preprocess_conll
from coref_pipeline.pipelines.segment.nodes import segment_frame

from ..paths import FIXTURES

PARAMS = {
    "language": "english",
    "metrics": ["muc", "bcub", "ceafe", "lea"],
    "remove_singletons": False,
    "genres": ["bc", "nw"],
    "default_genre": "nw",
}


@pytest.fixture
def gold_and_documents(minilm_tokenizer):
    gold = ConllFileDataset(str(FIXTURES / "tiny.v4_gold_conll")).load()
    frame = preprocess_conll(
        gold, {"min_columns": 12, "skip_bad_documents": False, "genres": ["bc"], "default_genre": "nw"}
    )
    documents = segment_frame(frame, minilm_tokenizer, [16], include_tokens=True)[16]
    return gold, documents


def test_gold_as_predictions_scores_100(gold_and_documents):
    gold, documents = gold_and_documents
    predictions = [{**d, "predicted_clusters": d["clusters"]} for d in documents]
    response, metrics, table, breakdown, figure = evaluate_predictions(predictions, gold, PARAMS)
    assert metrics["conll_f1"] == 100.0 and metrics["lea"]["f1"] == 100.0
    assert metrics["counts"]["metrics"]["muc"]["recall_den"] == 2  # two links in the gold
    [document] = parse_conll_lines(response.splitlines(), min_columns=1)
    assert {frozenset(c) for c in document.clusters} == {frozenset({(0, 1), (3, 3)}), frozenset({(3, 4), (6, 6)})}
    assert response.splitlines()[0] == gold.text.splitlines()[0]
    assert table["doc_key"].tolist() == ["bc/tiny/00/tiny_0000_0"] and table["genre"].tolist() == ["bc"]
    row = breakdown[(breakdown.category == "length") & (breakdown.group == "0-128")]
    assert row["documents"].item() == 1 and row["conll_f1"].item() == pytest.approx(1.0)
    assert figure.axes[0].get_ylabel() == "CoNLL F1 (%)"


def test_no_predicted_clusters_scores_0_and_a_missing_document_is_an_error(gold_and_documents):
    gold, documents = gold_and_documents
    predictions = [{**d, "predicted_clusters": []} for d in documents]
    _, metrics, *_ = evaluate_predictions(predictions, gold, PARAMS)
    assert metrics["muc"]["recall"] == 0.0
    with pytest.raises(KeyError, match="no predicted clusters for document"):
        evaluate_predictions([], gold, PARAMS)


def test_pipeline_has_each_model_and_split():
    names = {node.name for node in create_pipeline().nodes}
    expected = set()
    for model in ("baseline", "incremental"):
        expected |= {f"predict_{model}_test", f"evaluate_{model}_dev", f"evaluate_{model}_test"}
    assert names == expected
    for node in create_pipeline().nodes:
        assert node.tags == {node.name.split("_")[1]}  # one model per tag (dvc runs evaluate@<model>)
