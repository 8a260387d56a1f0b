"""The evaluate pipeline: its nodes over the library, one model per tag."""

from __future__ import annotations

from coref_pipeline.formats.conll import ConllFile
from coref_pipeline.formats.corpus import preprocess_corpus
from coref_pipeline.formats.segmentation import segment_words
from coref_pipeline.pipelines.evaluate.nodes import evaluate
from coref_pipeline.pipelines.evaluate.pipeline import create_pipeline
from tests.paths import FIXTURES


def test_the_node_reads_its_parameters_and_returns_every_output(minilm_tokenizer):
    gold = ConllFile.read(FIXTURES / "tiny.v4_gold_conll")
    documents = segment_words(preprocess_corpus(gold), minilm_tokenizer, [16], include_tokens=True)[16]
    predictions = [{**d, "predicted_clusters": d["clusters"]} for d in documents]
    params = {"metrics": ["muc", "bcub", "ceafe"], "remove_singletons": False, "genres": ["bc"], "default_genre": "bc"}
    response, metrics, scores, table, breakdown, figure = evaluate(predictions, gold, params)
    assert metrics == {"conll_f1": 100.0, "muc_f1": 100.0, "bcub_f1": 100.0, "ceafe_f1": 100.0}
    assert scores["muc_recall"] == 100.0 and "counts" in scores
    assert response.startswith("#begin document") and len(table) == 1 and len(breakdown) and figure.axes


def test_pipeline_has_each_model_and_split_then_the_summary():
    names = {node.name for node in create_pipeline().nodes}
    expected = {"summarise_test_sets", "score_named_models_test_sets"}
    for model in ("baseline", "incremental"):
        expected |= {f"predict_{model}_test", f"evaluate_{model}_dev", f"evaluate_{model}_test"}
        expected |= {f"score_{model}_dev_segment_lengths", f"score_{model}_test_sets", f"write_{model}_model_card"}
        expected.add(f"score_{model}_probes")
    assert names == expected
    for node in create_pipeline().nodes:
        if node.name == "summarise_test_sets":  # dvc runs evaluate_summary after both evaluate@<model>
            assert node.tags == {"summary"}
        elif node.name == "score_named_models_test_sets":  # dvc runs evaluate_models
            assert node.tags == {"models"}
        else:
            assert node.tags == {node.name.split("_")[1]}  # one model per tag (dvc runs evaluate@<model>)
