"""Runs on one work directory through `kedro run`: one at a time, and a killed one's directory taken over."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.paths import copy_project

pytestmark = pytest.mark.slow

WORK_DIR = Path("data/06_models/baseline_training")
# A short run: long enough (tens of seconds) for a second run to start while it trains.
SHORT_RUN = [
    "coref_train.overrides.max_steps=12",
    "coref_train.overrides.eval_frequency=12",
    "coref_train.overrides.checkpoint_frequency=6",
]


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = copy_project(tmp_path_factory.mktemp("concurrent"))
    result = subprocess.run(
        [sys.executable, "-m", "kedro", "run", "--pipelines=preprocess,segment"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return root


def start(root: Path, *params: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "kedro", "run", "--pipelines=coref_train", "--params", ",".join(params)]
    return subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen) -> tuple[int, str, str]:
    stdout, stderr = process.communicate(timeout=900)
    return process.returncode, stdout, stderr


def wait_for(condition, what: str, process: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, f"the run ended before {what}: {process.communicate()[1][-3000:]}"
        assert time.monotonic() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.2)


def holder(root: Path) -> dict:
    try:
        return json.loads((root / WORK_DIR / "run_holder.json").read_text())
    except (OSError, ValueError):
        return {}


def results(root: Path) -> dict[str, str]:
    """Hash of what a coref_train run leaves: the model, its dev predictions and metrics, the best checkpoint."""
    paths = [
        "data/06_models/baseline/model.safetensors",
        "data/06_models/baseline/coref_config.json",
        "data/07_model_output/baseline.dev.jsonlines",
        "data/08_reporting/coref_train_dev_metrics.json",
        str(WORK_DIR / "best" / "model.safetensors"),
    ]
    return {path: hashlib.sha256((root / path).read_bytes()).hexdigest() for path in paths}


def test_a_second_run_is_refused_at_once_and_the_first_finishes_as_if_alone(project):
    code, _, stderr = finish(start(project, *SHORT_RUN))
    assert code == 0, stderr[-3000:]
    alone = results(project)

    first = start(project, *SHORT_RUN, "coref_train.restart=true")
    wait_for(lambda: holder(project).get("pid") == first.pid, "lock held by the first run", first)
    started = time.monotonic()
    code, _, stderr = finish(start(project, *SHORT_RUN, "coref_train.restart=true"))
    refused_after = time.monotonic() - started
    assert first.poll() is None, "the first run ended before the second was refused: the test proves nothing"
    lines = stderr.strip().splitlines()
    assert code != 0 and len(lines) == 1, stderr[-3000:]
    assert lines[0].startswith(f"error: {WORK_DIR} is in use by another run (pid {first.pid} on "), lines[0]
    assert "started " in lines[0] and "--params coref_train.work_dir=PATH" in lines[0], lines[0]

    code, _, stderr = finish(first)
    assert code == 0, stderr[-3000:]
    assert results(project) == alone  # same seed, same numbers: the refused run touched nothing
    print(f"second run refused after {refused_after:.1f} s")


def test_a_run_killed_before_its_first_checkpoint_is_taken_over_and_says_it_starts_afresh(project):
    shutil.rmtree(project / WORK_DIR, ignore_errors=True)
    killed = start(project, *SHORT_RUN, "coref_train.overrides.checkpoint_frequency=1000")
    fingerprint = project / WORK_DIR / "run_fingerprint.txt"
    wait_for(lambda: holder(project).get("pid") == killed.pid and fingerprint.is_file(), "the run started", killed)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()

    code, stdout, stderr = finish(start(project, *SHORT_RUN, "coref_train.overrides.checkpoint_frequency=1000"))
    assert code == 0, stderr[-3000:]
    log = " ".join((stdout + stderr).split())
    assert (
        "starting a fresh run from step 0: the earlier run of this configuration stopped before its first "
        "checkpoint (one is written every 1000 steps: checkpoint_frequency)"
    ) in log, log[-3000:]
