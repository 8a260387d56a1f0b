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


# The layers of docs/architecture.md's picture, bottom up: each folder or root module of the package, by layer.
LAYERS = {
    0: {"errors", "files", "config_base", "pretrained", "runtime"},
    1: {"formats"},
    2: {"evaluation"},
    3: {"models", "original"},
    4: {"serving", "sharing"},
    5: {"studies"},
    6: {"training", "pretraining"},
    7: {"pipelines", "cli", "datasets", "hooks", "settings", "pipeline_registry", "__main__", "__init__"},
}
LAYER_OF = {unit: layer for layer, units in LAYERS.items() for unit in units}


def _unit(path) -> str:
    """The folder or root module of the package that ``path`` is part of."""
    relative = path.relative_to(SOURCE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def _unit_imports() -> dict[str, set[str]]:
    """Folder or root module -> the others its modules import (``coref_pipeline.X...`` or
    ``from coref_pipeline import X``)."""
    graph: dict[str, set[str]] = {}
    for path in _python_files(SOURCE):
        unit = _unit(path)
        graph.setdefault(unit, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "coref_pipeline" and len(parts) > 1 and parts[1] in LAYER_OF and parts[1] != unit:
                    graph[unit].add(parts[1])
    return graph


def test_every_folder_and_root_module_has_a_layer_and_the_picture_names_it():
    units = {_unit(path) for path in _python_files(SOURCE)}
    assert units == set(LAYER_OF), (units - set(LAYER_OF), set(LAYER_OF) - units)
    picture = (PROJECT_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").split("```", 2)[1]
    for unit in units - {"__init__"}:
        shown = f"{unit}/" if (SOURCE / unit).is_dir() else f"{unit}.py"
        assert shown in picture, f"docs/architecture.md's picture does not show {shown}"
    for layer, members in LAYERS.items():  # the picture's floors are the layers, bottom up
        floor = next(line for line in picture.splitlines() if line.startswith(f" {layer}  "))
        assert all((f"{m}/" if (SOURCE / m).is_dir() else f"{m}.py") in floor for m in members - {"__init__"}), floor


def test_no_import_runs_back_up_a_layer_and_there_is_no_circle():
    graph = _unit_imports()
    upward = [
        (unit, target) for unit, targets in graph.items() for target in targets if LAYER_OF[target] > LAYER_OF[unit]
    ]
    assert upward == [], f"imports that run back up a layer: {upward}"
    # Within a layer, one way only: the graph of folders and root modules has no circle.
    state: dict[str, str] = {}

    def visit(unit: str, path: list[str]) -> None:
        state[unit] = "open"
        for target in sorted(graph.get(unit, ())):
            assert state.get(target) != "open", f"a circle of imports: {' -> '.join([*path, unit, target])}"
            if target not in state:
                visit(target, [*path, unit])
        state[unit] = "done"

    for unit in sorted(graph):
        if unit not in state:
            visit(unit, [])


def test_each_subpackage_says_its_idea_in_a_sentence():
    for folder in sorted(path for path in SOURCE.iterdir() if (path / "__init__.py").is_file()):
        docstring = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8")))
        assert docstring and docstring.split("\n\n")[0].strip().endswith("."), (
            f"{folder.name}/__init__.py has no docstring saying its idea"
        )


def test_the_package_root_holds_at_most_ten_modules():
    modules = sorted(path.name for path in SOURCE.glob("*.py"))
    assert len(modules) <= 10, modules


def _module_file(name: str):
    """The file of project module ``coref_pipeline.X.Y`` (a package's ``__init__.py``), or None."""
    path = SOURCE.parent.joinpath(*name.split("."))
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return path / "__init__.py" if (path / "__init__.py").is_file() else None


def test_no_circle_of_modules():
    """No module imports, through others, a module that imports it (imports inside functions counted too)."""
    graph: dict = {}
    for path in _python_files(SOURCE):
        targets = graph.setdefault(path, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [
                    f"{node.module}.{alias.name}" if _module_file(f"{node.module}.{alias.name}") else node.module
                    for alias in node.names
                ]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                target = _module_file(name) if name.startswith("coref_pipeline.") else None
                if target is not None and target != path:
                    targets.add(target)
    state: dict = {}

    def visit(module, trail) -> None:
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                circle = [*trail, module, target]
                pytest.fail(
                    "a circle of imports: "
                    + " -> ".join(str(p.relative_to(SOURCE)) for p in circle[circle.index(target) :])
                )
            if target not in state:
                visit(target, [*trail, module])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
