"""The house rules of docs/architecture.md, checked on the source."""

from __future__ import annotations

import ast
import re

import pytest

from tests.paths import PROJECT_ROOT

SOURCE = PROJECT_ROOT / "src" / "coref_pipeline"
FRAMEWORK_FILES = {
    "settings.py",
    "pipeline_registry.py",
    "datasets.py",
    "hooks.py",
    "kedro_run.py",
}  # Kedro's own hooks into the project


def _python_files(root):
    return sorted(path for path in root.rglob("*.py") if "__pycache__" not in path.parts)


def _imports(path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def _outside_pipelines():
    for path in _python_files(SOURCE):
        relative = path.relative_to(SOURCE)
        if relative.parts[0] != "pipelines" and relative.name not in FRAMEWORK_FILES:
            yield path


@pytest.mark.parametrize("root", ["src", "benchmarks", "tests"])
def test_nothing_outside_pipelines_imports_a_node(root):
    for path in _python_files(PROJECT_ROOT / root):
        relative = path.relative_to(PROJECT_ROOT).as_posix()
        if relative.startswith(("src/coref_pipeline/pipelines/", "tests/pipelines/", "tests/test_architecture.py")):
            continue
        if relative in ("src/coref_pipeline/pipeline_registry.py", "src/coref_pipeline/hooks.py"):
            continue
        assert not any(name.startswith("coref_pipeline.pipelines") for name in _imports(path)), relative


def test_the_library_does_not_import_the_framework():
    for path in _outside_pipelines():
        frameworks = {name for name in _imports(path) if name.split(".")[0] in {"kedro", "kedro_datasets", "dvc"}}
        assert not frameworks, f"{path.relative_to(PROJECT_ROOT)} imports {sorted(frameworks)}"


def test_one_training_step_backpropagates():
    """Only ``training_step`` backpropagates (through the engine, whose two calls are Fabric's)."""
    calls = [
        (path.relative_to(PROJECT_ROOT).as_posix(), line.strip())
        for path in _python_files(SOURCE)
        for line in path.read_text(encoding="utf-8").splitlines()
        if re.search(r"\.backward\(", line)
    ]
    in_loop = [line for where, line in calls if where == "src/coref_pipeline/training/loop.py"]
    in_engine = [line for where, line in calls if where == "src/coref_pipeline/training/engine.py"]
    assert in_loop == ["engine.backward(loss)"], calls
    assert len(in_engine) == 2 and all("self.fabric.backward(" in line for line in in_engine), calls
    assert len(calls) == 3, calls


def _module_constants(path):
    """``(NAME, value)`` of the module-level upper-case assignments whose value is a literal."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        for target in targets:
            if isinstance(target, ast.Name) and target.id.isupper() and node.value is not None:
                try:
                    yield target.id, ast.literal_eval(node.value)
                except ValueError:
                    continue


def test_each_shared_constant_is_defined_once():
    shared = {
        ("bc", "bn", "mz", "nw", "pt", "tc", "wb"): "the OntoNotes genres",
        "[SPL]": "the [CLS]/[SEP] speaker",
        "nw": "the default genre",
        "-": "the CoNLL files' no-speaker",
    }
    for value, what in shared.items():
        places = [
            f"{path.relative_to(SOURCE)}:{name}"
            for path in _python_files(SOURCE)
            for name, constant in _module_constants(path)
            if constant == value
        ]
        assert len(places) == 1, (what, places)
    for path in _python_files(SOURCE):
        text = path.read_text(encoding="utf-8")
        assert '"[SPL]"' not in text or path.name == "segmentation.py", path
        assert "os.replace(" not in text or path.name == "files.py", path  # one atomic writer
