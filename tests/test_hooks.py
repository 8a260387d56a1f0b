"""Kedro hooks: under torchrun or SLURM only rank 0 saves a pipeline's outputs."""

from __future__ import annotations

import pytest
from kedro.io import DataCatalog, MemoryDataset
from kedro.pipeline import Pipeline, node
from kedro_datasets.json import JSONDataset

from coref_pipeline.hooks import RankZeroWritesHook
from coref_pipeline.runtime.processes import launched_rank


def catalog_and_pipeline(tmp_path):
    catalog = DataCatalog({"metrics": JSONDataset(filepath=str(tmp_path / "metrics.json"))})
    pipeline = Pipeline([node(lambda: {"f1": 1.0}, inputs=None, outputs="metrics")])
    return catalog, pipeline


@pytest.mark.parametrize(
    ("environment", "rank"),
    [({}, 0), ({"RANK": "1"}, 1), ({"SLURM_PROCID": "3"}, 3), ({"RANK": "0", "SLURM_PROCID": "5"}, 0)],
)
def test_the_rank_comes_from_torchrun_or_slurm(monkeypatch, environment, rank):
    for variable in ("RANK", "SLURM_PROCID"):
        monkeypatch.delenv(variable, raising=False)
    for variable, value in environment.items():
        monkeypatch.setenv(variable, value)
    assert launched_rank() == rank


def test_only_rank_0_saves_the_outputs(monkeypatch, tmp_path):
    monkeypatch.delenv("SLURM_PROCID", raising=False)
    for rank, writes in (("1", False), ("0", True)):
        monkeypatch.setenv("RANK", rank)
        catalog, pipeline = catalog_and_pipeline(tmp_path)
        RankZeroWritesHook().before_pipeline_run({}, pipeline, catalog)
        catalog.save("metrics", {"f1": 1.0})
        assert isinstance(catalog.get("metrics"), MemoryDataset) is not writes
        assert (tmp_path / "metrics.json").exists() is writes


def test_a_missing_raw_file_is_the_corpus_setting_not_a_step_to_run(tmp_path):
    """raw_train has a producer now (ontonotes, run by name only): a missing one still points at the corpus
    setting first, and names ontonotes as the way to write it from OntoNotes."""
    from coref_pipeline.datasets import ConllFileDataset
    from coref_pipeline.hooks import MissingPrerequisiteError, PrerequisitesHook

    path = tmp_path / "corpus" / "train.english.v4_gold_conll"
    catalog = DataCatalog({"raw_train": ConllFileDataset(filepath=str(path))})
    pipeline = Pipeline([node(lambda conll: conll, inputs="raw_train", outputs="frame")])
    with pytest.raises(MissingPrerequisiteError) as raised:
        PrerequisitesHook().before_pipeline_run({"project_path": str(tmp_path)}, pipeline, catalog)
    assert str(raised.value) == (
        f"this run needs what no run has written yet: raw_train ({path}): no such file (the corpus is named in "
        "conf/base/globals.yml), or `kedro run --pipelines=ontonotes` writes it from OntoNotes"
    )
