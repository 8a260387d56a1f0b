"""The CI check that dvc.lock matches the committed code, parameters and results (.ci/check_dvc_lock.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.paths import PROJECT_ROOT

CHECK = PROJECT_ROOT / ".ci" / "check_dvc_lock.py"
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def run(command: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, **GIT_IDENTITY, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env, timeout=300)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_a_stale_lock_fails_with_the_stage_and_the_command(tmp_path):
    (tmp_path / "step.py").write_text("print('one')\n")
    (tmp_path / "params.yaml").write_text("step:\n  size: 1\n")
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n  step:\n    cmd: python step.py > result.json\n    deps: [step.py]\n"
        "    params: [step.size]\n    outs:\n      - result.json:\n          cache: false\n"
    )
    for command in (["git", "init", "-q"], ["dvc", "init", "-q"], ["dvc", "repro", "-q"]):
        run(command, tmp_path)
    (tmp_path / "result.json").write_text("{}\n")
    run(["git", "add", "-A"], tmp_path)
    run(["git", "commit", "-qm", "locked"], tmp_path)
    check = [sys.executable, str(CHECK)]
    fresh = run(check, tmp_path, check=False)
    assert fresh.returncode == 1 and "result.json" in fresh.stderr  # the committed result is not the run's
    run(["dvc", "repro", "-q"], tmp_path)
    run(["git", "commit", "-qam", "results"], tmp_path)
    assert run(check, tmp_path).returncode == 0

    (tmp_path / "step.py").write_text("print('two')\n")  # code changed, lock not refreshed
    stale = run(check, tmp_path, check=False)
    assert stale.returncode == 1
    [line] = stale.stderr.strip().splitlines()
    assert line.startswith("dvc.lock is stale for stage 'step': step.py") and "`dvc repro`" in line

    (tmp_path / "step.py").write_text("print('one')\n")
    (tmp_path / "params.yaml").write_text("step:\n  size: 2\n")  # a parameter changed
    stale = run(check, tmp_path, check=False)
    assert stale.returncode == 1 and "params.yaml" in stale.stderr


def test_without_dvc_installed_it_says_to_install_the_project(tmp_path):
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    env = {**os.environ, "PATH": str(empty_bin)}  # git and dvc are not on it
    result = subprocess.run([sys.executable, str(CHECK)], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert "dvc is not installed" in line and "pip install -e ." in line
