"""`kedro viz build`: a static site whose API JSON lists every pipeline and node."""

from __future__ import annotations

import json
import subprocess
import sys

from kedro.framework.project import configure_project

from tests.paths import copy_project


def test_static_site_lists_every_pipeline_and_node(tmp_path):
    root = copy_project(tmp_path / "project", with_raw_data=False)
    command = [sys.executable, "-m", "kedro", "viz", "build"]
    result = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    api = root / "build" / "api"
    main = json.loads((api / "main").read_text())
    configure_project("coref_pipeline")
    from coref_pipeline.pipeline_registry import NOT_IN_DEFAULT, register_pipelines

    expected = register_pipelines()
    assert {p["id"] for p in main["pipelines"]} == set(expected)
    assert set(expected) >= {"preprocess", "segment", "coref_train", "incremental_train", "evaluate", "__default__"}
    task_names = {node["name"] for node in main["nodes"] if node["type"] == "task"}
    assert task_names == {node.name for node in expected["__default__"].nodes}  # the page opens on a plain kedro run
    assert set(expected) - {"__default__", *NOT_IN_DEFAULT} == {
        "preprocess",
        "segment",
        "coref_train",
        "incremental_train",
        "evaluate",
    }
    for name, pipeline in expected.items():
        listed = json.loads((api / "pipelines" / name).read_text())
        names = {node["name"] for node in listed["nodes"] if node["type"] == "task"}
        assert names == {node.name for node in pipeline.nodes}, name
    assert (root / "build" / "index.html").is_file()
