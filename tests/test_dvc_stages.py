"""dvc.yaml follows the code and the parameters: each stage's deps are exactly the modules it runs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from .paths import PROJECT_ROOT

PACKAGE = PROJECT_ROOT / "src" / "coref_pipeline"
STAGE_PIPELINES = {
    "preprocess": "preprocess",
    "segment": "segment",
    "coref_train": "coref_train",
    "incremental_train": "incremental_train",
    "evaluate": "evaluate",
}
ALWAYS = {"src/coref_pipeline/datasets.py"}  # the catalog's dataset types


def _module_file(name: str) -> Path | None:
    path = PACKAGE.joinpath(*name.split(".")[1:])
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def _imported(path: Path, module: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: None if path.name == "__init__.py" else -1]
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("coref_pipeline.") and _module_file(name)}


def import_closure(module: str) -> set[str]:
    """Files (relative to the project) of ``module`` and of every project module it imports, transitively."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen or _module_file(name) is None:
            continue
        seen.add(name)
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(2, len(parts)))  # parent packages run too
        todo.extend(_imported(_module_file(name), name))
    files = (_module_file(name) for name in seen if name != "coref_pipeline")
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


@pytest.mark.parametrize("stage", sorted(STAGE_PIPELINES))
def test_code_deps_are_the_modules_the_stage_runs(stage):
    spec = STAGES[stage].get("do", STAGES[stage])
    expected = import_closure(f"coref_pipeline.pipelines.{STAGE_PIPELINES[stage]}.pipeline") | ALWAYS
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
    assert all((PROJECT_ROOT / corpus["dir"] / corpus[split]).is_file() for split in ("train", "dev", "test"))


def test_training_stages_read_the_segment_and_scoring_parameters():
    for stage in ("coref_train", "incremental_train"):
        params = {key: value for entry in STAGES[stage]["params"] for key, value in entry.items()}
        assert params["conf/base/parameters_segment.yml"] == ["segment"]
        assert params["conf/base/parameters_evaluate.yml"] == ["evaluate.remove_singletons"]
    segment = {key: value for entry in STAGES["segment"]["params"] for key, value in entry.items()}
    assert "coref_train.presets" in segment["conf/base/parameters_coref_train.yml"]
