"""dvc.yaml follows the code and the parameters: each stage's deps are exactly the modules it runs."""

from __future__ import annotations

import pytest
import yaml

from coref_pipeline.training.checkpoints import code_files
from tests.paths import PROJECT_ROOT

STAGES_AND_PIPELINES = (
    "ontonotes",
    "preprocess",
    "segment",
    "pretrain",
    "coref_train",
    "incremental_train",
    "evaluate",
)  # same names
ALWAYS = {"src/coref_pipeline/datasets.py"}  # the catalog's dataset types


def import_closure(pipeline: str) -> set[str]:
    """Files (relative to the project) of a pipeline and of every project module it imports, transitively.

    The same reading of the imports as a training run's code identity (``checkpoints.code_files``).
    """
    files = code_files(f"pipelines.{pipeline}.pipeline")
    return {path.relative_to(PROJECT_ROOT).as_posix() for path in files if path.read_text(encoding="utf-8").strip()}


def _expand(deps: list[str]) -> set[str]:
    files = set()
    for dep in deps:
        path = PROJECT_ROOT / dep
        if dep.startswith("src/") and path.is_dir():
            files.update(p.relative_to(PROJECT_ROOT).as_posix() for p in path.rglob("*.py") if p.read_text().strip())
        elif dep.startswith("src/"):
            files.add(dep)
    return files


STAGES = yaml.safe_load((PROJECT_ROOT / "dvc.yaml").read_text())["stages"]


@pytest.mark.parametrize("stage", STAGES_AND_PIPELINES)
def test_code_deps_are_the_modules_the_stage_runs(stage):
    spec = STAGES[stage].get("do", STAGES[stage])
    expected = import_closure(stage) | ALWAYS
    listed = _expand(spec["deps"])
    assert listed - expected == set(), f"{stage}: deps it does not import"
    assert expected - listed == set(), f"{stage}: imported modules missing from deps"


def test_the_corpus_folder_is_the_one_the_catalog_reads():
    catalog = (PROJECT_ROOT / "conf" / "base" / "catalog.yml").read_text()
    corpus = yaml.safe_load((PROJECT_ROOT / "conf" / "base" / "globals.yml").read_text())["corpus"]
    assert "${globals:corpus.dir}/${globals:corpus.train}" in catalog
    for stage in ("preprocess", "evaluate"):
        spec = STAGES[stage].get("do", STAGES[stage])
        assert "${corpus.dir}" in spec["deps"]
    for stage in ("coref_train", "incremental_train"):  # they score dev against the gold dev file
        assert "${corpus.dir}/${corpus.dev}" in STAGES[stage]["deps"]
    assert all((PROJECT_ROOT / corpus["dir"] / corpus[split]).is_file() for split in ("train", "dev", "test"))


def test_training_stages_read_the_segment_and_scoring_parameters():
    for stage in ("coref_train", "incremental_train"):
        params = {key: value for entry in STAGES[stage]["params"] for key, value in entry.items()}
        assert params["conf/base/parameters_segment.yml"] == ["segment"]
        assert params["conf/base/parameters_evaluate.yml"] == ["evaluate.remove_singletons"]
    segment = {key: value for entry in STAGES["segment"]["params"] for key, value in entry.items()}
    assert "coref_train.presets" in segment["conf/base/parameters_coref_train.yml"]


def test_both_ontonotes_stages_run_the_ontonotes_pipeline_with_its_code():
    """ontonotes (the release) and ontonotes_parquet (the Hub) run one pipeline: the same code deps."""
    code = {stage: _expand(STAGES[stage]["do"]["deps"]) for stage in ("ontonotes", "ontonotes_parquet")}
    assert code["ontonotes"] == code["ontonotes_parquet"] == import_closure("ontonotes") | ALWAYS
    for stage in ("ontonotes", "ontonotes_parquet"):
        assert STAGES[stage]["do"]["cmd"] == "kedro run --pipelines=ontonotes"
        assert STAGES[stage]["do"]["outs"] == ["${corpus.dir}"]  # the folder preprocess and evaluate read


def test_the_ontonotes_stages_exist_only_for_a_named_source():
    """A foreach over the sources of conf/base/parameters_ontonotes.yml, which names none: no stage by default."""
    assert STAGES["ontonotes"]["foreach"] == "${ontonotes.from_release}"
    assert STAGES["ontonotes_parquet"]["foreach"] == "${ontonotes.from_parquet}"
    assert {"${item.release}", "${item.skeletons}"} <= set(STAGES["ontonotes"]["do"]["deps"])
    assert "${item}" in STAGES["ontonotes_parquet"]["do"]["deps"]
    params = yaml.safe_load((PROJECT_ROOT / "conf" / "base" / "parameters_ontonotes.yml").read_text())
    assert params["ontonotes"]["from_release"] == {} and params["ontonotes"]["from_parquet"] == {}
    assert "conf/base/parameters_ontonotes.yml" in yaml.safe_load((PROJECT_ROOT / "dvc.yaml").read_text())["vars"]
