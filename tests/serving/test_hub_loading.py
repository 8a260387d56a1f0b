"""Model directories by Hugging Face Hub id, read from a folder laid out as the Hub's cache, offline.

No Hub is reachable from the test machines: the cache is built here as ``huggingface_hub`` lays it out
(``models--OWNER--NAME/refs/REVISION`` holding a commit, ``snapshots/COMMIT/`` the files), and every
load runs in a fresh interpreter with ``HF_HUB_CACHE`` and ``HF_HUB_OFFLINE=1`` (``huggingface_hub``
reads them when imported). Downloading from the Hub itself is not exercised.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from coref_pipeline.models.directory import ModelDirectoryError, resolve_model_directory
from coref_pipeline.serving.coref_model import CorefModel
from tests.models.tiny import save_tiny_models

TEXT = "Ada wrote a note to Charles. She sent it in the morning, and he read it twice."
MAIN = "0123456789abcdef0123456789abcdef01234567"
V2 = "fedcba9876543210fedcba9876543210fedcba98"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """A Hub cache holding acme/coref-tiny: main is the tiny baseline, tag v2 the tiny incremental model."""
    root = tmp_path_factory.mktemp("hub")
    baseline, incremental = save_tiny_models(root / "models")
    repository = root / "cache" / "models--acme--coref-tiny"
    for commit, model in ((MAIN, baseline), (V2, incremental)):
        shutil.copytree(model, repository / "snapshots" / commit)
    (repository / "refs").mkdir()
    (repository / "refs" / "main").write_text(MAIN)
    (repository / "refs" / "v2").write_text(V2)
    return root / "cache", baseline, incremental


def offline(cache, code: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def clusters_by_id(cache, revision: str | None) -> dict:
    code = (
        "import json; from coref_pipeline.serving.coref_model import CorefModel; "
        f"m = CorefModel.load('acme/coref-tiny', revision={revision!r}); "
        f"print(json.dumps({{'type': m.model_type, 'clusters': m.predict({TEXT!r}).clusters}}))"
    )
    return json.loads(offline(cache, code).stdout.strip().splitlines()[-1])


def test_a_hub_id_loads_from_the_cache_offline_at_main_a_tag_or_a_commit(hub):
    cache, baseline, incremental = hub
    expected = {
        "baseline": [[list(span) for span in c] for c in CorefModel.load(baseline).predict(TEXT).clusters],
        "incremental": [[list(span) for span in c] for c in CorefModel.load(incremental).predict(TEXT).clusters],
    }
    assert expected["baseline"] and expected["incremental"]
    for revision, model_type in ((None, "baseline"), ("main", "baseline"), ("v2", "incremental"), (V2, "incremental")):
        found = clusters_by_id(cache, revision)
        assert found == {"type": model_type, "clusters": expected[model_type]}, revision


def test_what_cannot_be_had_is_one_line(hub, tmp_path):
    cache, baseline, _ = hub
    code = "from coref_pipeline.serving.coref_model import CorefModel; CorefModel.load('acme/absent')"
    result = offline(cache, code, check=False)
    assert result.returncode != 0
    assert "acme/absent at" not in result.stderr  # no revision given
    assert "acme/absent: not a local directory, and not in the Hugging Face cache" in result.stderr
    code = (
        "from coref_pipeline.serving.coref_model import CorefModel; CorefModel.load('acme/coref-tiny', revision='v9')"
    )
    assert "acme/coref-tiny at revision v9: not a local directory" in offline(cache, code, check=False).stderr
    # A local directory is read as it is; a revision is refused for it; a path that is no Hub id is not looked up.
    assert resolve_model_directory(baseline) == baseline
    with pytest.raises(ModelDirectoryError, match="a revision .* is for a Hub model id"):
        resolve_model_directory(baseline, revision="main")
    assert resolve_model_directory(tmp_path / "nowhere" / "x" / "y") == tmp_path / "nowhere" / "x" / "y"


@pytest.mark.slow
def test_predict_and_the_spacy_component_take_a_hub_id(hub, tmp_path):
    cache, _, incremental = hub
    source, out = tmp_path / "text.txt", tmp_path / "out.jsonl"
    source.write_text(TEXT, encoding="utf-8")
    code = (
        "import sys; from coref_pipeline.cli import main; sys.argv = ['coref-pipeline', 'predict', '--model', "
        f"'acme/coref-tiny', '--revision', 'v2', '--precision', '32', {str(source)!r}, {str(out)!r}]; main()"
    )
    offline(cache, code)
    expected = CorefModel.load(incremental).predict(TEXT).clusters
    assert [[tuple(span) for span in c] for c in json.loads(out.read_text())["clusters"]] == expected
    pytest.importorskip("spacy")
    code = (
        "import json, spacy; nlp = spacy.blank('en'); "
        "nlp.add_pipe('coref_pipeline', config={'model': 'acme/coref-tiny', 'revision': 'v2'}); "
        f"print(json.dumps(len(nlp({TEXT!r})._.coref_clusters)))"
    )
    assert int(offline(cache, code).stdout.strip().splitlines()[-1]) > 0


def test_a_stopped_predict_on_a_hub_id_does_not_go_on_once_its_revision_moved(hub, tmp_path):
    """What a stopped ``predict`` keeps is tied to the snapshot its revision resolved to: main moved to another
    commit gives other settings, so the next run starts the file again instead of mixing two models' records."""
    cache = shutil.copytree(hub[0], tmp_path / "cache")
    source = tmp_path / "text.txt"
    source.write_text(TEXT, encoding="utf-8")
    code = (
        "import json; from coref_pipeline.cli.predict import _load_model, _output_settings; "
        "m, d = _load_model('acme/coref-tiny', None, 'cpu', '32'); "
        f"print(json.dumps(_output_settings({str(source)!r}, 'acme/coref-tiny', None, d, m, None, None, 1)['weights']))"
    )
    before = json.loads(offline(cache, code).stdout.strip().splitlines()[-1])
    (cache / "models--acme--coref-tiny" / "refs" / "main").write_text(V2)
    after = json.loads(offline(cache, code).stdout.strip().splitlines()[-1])
    assert before and after and before != after
    assert MAIN in before[0][0] and V2 in after[0][0]
