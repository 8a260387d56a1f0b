"""The notebook runs in a project whose catalog holds a trained model (a tiny random one here)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests.models.tiny import save_tiny_models
from tests.paths import PROJECT_ROOT, copy_project

NOTEBOOK = PROJECT_ROOT / "notebooks" / "predict_on_text.ipynb"

RUNNER = textwrap.dedent(
    """
    import json, sys
    import matplotlib
    matplotlib.use("Agg")
    cells = json.load(open(sys.argv[1], encoding="utf-8"))["cells"]
    namespace = {}
    for cell in cells:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), "notebook cell", "exec"), namespace)
    result, embeddings = namespace["result"], namespace["embeddings"]
    axes = namespace["figure"].axes[0]
    points = sum(len(collection.get_offsets()) for collection in axes.collections)
    print(json.dumps({"model_type": namespace["model"].model_type, "text": result.text,
                      "mentions": sum(map(len, result.clusters)), "points": points,
                      "html": "coref-mention" in result._repr_html_()}))
    """
)


@pytest.mark.slow
def test_the_notebook_loads_a_model_from_the_catalog_and_draws_its_views(tmp_path):
    root = copy_project(tmp_path / "project", with_raw_data=False)
    shutil.copytree(PROJECT_ROOT / "notebooks", root / "notebooks")
    # The catalog's incremental_model is data/06_models/incremental.
    models = root / "data" / "06_models"
    save_tiny_models(models, threshold=-1e4)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COREF_NOTEBOOK_MODEL": "incremental_model"}
    completed = subprocess.run(
        [sys.executable, "-c", RUNNER, str(root / "notebooks" / NOTEBOOK.name)],
        cwd=root / "notebooks",
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    figures = json.loads(completed.stdout.strip().splitlines()[-1])
    assert figures["model_type"] == "incremental" and "Ada Lovelace" in figures["text"]
    assert figures["mentions"] >= 3 and figures["points"] == figures["mentions"] and figures["html"]
