"""DVC drives the Kedro pipelines: repro, no-op rerun, exact invalidation, metrics diff, push and pull.

Runs in a temporary git + DVC copy of the repository on the embedded sample,
with training cut to a few steps so that it fits in CI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.paths import PROJECT_ROOT, use_sample_corpus

ALL_STAGES = {
    "preprocess",
    "segment",
    "pretrain",
    "coref_train",
    "incremental_train",
    "evaluate@baseline",
    "evaluate@incremental",
    "evaluate_models",
    "evaluate_summary",
}


def run(command: list[str], cwd: Path, timeout: int = 1200) -> str:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.update(
        {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    )
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert result.returncode == 0, f"{command}:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result.stdout + result.stderr


def stages_run(output: str) -> set[str]:
    return set(re.findall(r"Running stage '([^']+)'", output))


def edit_yaml(path: Path, change) -> None:
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def short_training(data: dict, steps: int) -> None:
    data["coref_train"]["overrides"] = {"max_steps": steps, "eval_frequency": steps}


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    """The tracked files of the project in a new git repository, training cut short."""
    root = tmp_path_factory.mktemp("dvc") / "repo"
    files = subprocess.run(["git", "ls-files"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True)
    for name in files.stdout.splitlines():
        source = PROJECT_ROOT / name
        if not source.is_file() or name.startswith(("data/08_reporting/", "dvc.lock")):
            continue
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, root / name)
    use_sample_corpus(root)  # the tests' fast corpus in conf/base, which DVC reads
    conf = root / "conf" / "base"
    edit_yaml(conf / "parameters_segment.yml", lambda d: d["segment"].update(max_segment_lens=[384]))
    edit_yaml(conf / "parameters_coref_train.yml", lambda d: short_training(d, 3))
    edit_yaml(
        conf / "parameters_incremental_train.yml",
        lambda d: d["incremental_train"]["overrides"].update(max_steps=2, eval_frequency=2),
    )
    run(["git", "init", "-q"], root)
    run(["git", "add", "-A"], root)
    run(["git", "commit", "-qm", "copy"], root)
    return root


@pytest.mark.slow
def test_repro_rerun_invalidation_metrics_diff_push_and_pull(repository, tmp_path):
    first = run(["dvc", "repro"], repository)
    assert stages_run(first) == ALL_STAGES
    for model in ("baseline", "incremental"):
        assert (repository / "data" / "06_models" / model / "model.safetensors").is_file()
        assert (repository / "data" / "08_reporting" / f"metrics_{model}_test.json").is_file()

    second = run(["dvc", "repro"], repository)
    assert stages_run(second) == set(), second
    assert "up to date" in run(["dvc", "status"], repository)
    run(["git", "add", "-A"], repository)
    run(["git", "commit", "-qm", "first run"], repository)

    # A segment parameter changes what the training stages read: dvc status says so for each.
    segment_params = repository / "conf" / "base" / "parameters_segment.yml"
    edit_yaml(segment_params, lambda d: d["segment"].update(include_tokens=False))
    status = json.loads(run(["dvc", "status", "--json"], repository).strip().splitlines()[-1])
    assert {"segment", "coref_train", "incremental_train"} <= set(status), status
    for stage in ("coref_train", "incremental_train"):
        changed = [entry.get("changed deps", {}) for entry in status[stage] if isinstance(entry, dict)]
        assert any("conf/base/parameters_segment.yml" in deps for deps in changed), status[stage]
    run(["git", "checkout", "--", str(segment_params)], repository)
    assert "up to date" in run(["dvc", "status"], repository)

    # One coref_train parameter: exactly the stages that read it and what depends on them re-run.
    edit_yaml(repository / "conf" / "base" / "parameters_coref_train.yml", lambda d: short_training(d, 14))
    third = run(["dvc", "repro"], repository)
    # (segment reads the chosen preset's length and tokenizer, so DVC re-runs it too: same output, nothing more.)
    assert stages_run(third) == {
        "segment",
        "coref_train",
        "incremental_train",
        "evaluate@baseline",
        "evaluate@incremental",
        "evaluate_summary",
    }

    diff = json.loads(run(["dvc", "metrics", "diff", "--json"], repository).strip().splitlines()[-1])
    changed = {
        path: values["conll_f1"]
        for path, values in diff.items()
        if "conll_f1" in values and values["conll_f1"].get("diff")
    }
    # more steps move the models' figures (which ones: the sample's dev F1 may stay at a few steps' value)
    assert changed, diff
    shown = run(["dvc", "metrics", "show"], repository)
    assert max(len(line) for line in shown.splitlines()) <= 120, shown
    assert "counts" not in shown and "recall" not in shown  # raw counts live in scores_*.json
    text = run(["dvc", "metrics", "diff"], repository)
    assert "conll_f1" in text and all(path in text for path in changed), text

    # A named test set (its file in data/01_raw/test_sets, its name in evaluate.test_sets): only the
    # evaluation stages re-run, and `dvc metrics show` lists the new set's figures for each model.
    sets = repository / "data" / "01_raw" / "test_sets"
    shutil.copy(repository / "data" / "01_raw" / "sample" / "test.english.v4_gold_conll", sets / "again.conll")
    edit_yaml(
        repository / "conf" / "base" / "parameters_evaluate.yml",
        lambda d: d["evaluate"].update(test_sets={"again": {"path": "data/01_raw/test_sets/again.conll"}}),
    )
    fourth = run(["dvc", "repro"], repository)
    assert stages_run(fourth) == {"evaluate@baseline", "evaluate@incremental", "evaluate_models", "evaluate_summary"}
    shown = run(["dvc", "metrics", "show"], repository)
    for model in ("baseline", "incremental"):
        again = json.loads((repository / f"data/08_reporting/test_sets/{model}/again.json").read_text())
        test = json.loads((repository / f"data/08_reporting/metrics_{model}_test.json").read_text())
        assert again == test  # the same file under another name: the same figures
        assert f"data/08_reporting/test_sets/{model}/again.json" in shown
    assert max(len(line) for line in shown.splitlines()) <= 120, shown

    # Share through a local remote; a fresh clone gets every output without recomputing.
    remote = tmp_path / "remote"
    run(["dvc", "remote", "add", "-d", "local", str(remote)], repository)
    run(["git", "add", "-A"], repository)
    run(["git", "commit", "-qm", "second run"], repository)
    run(["dvc", "push"], repository)
    clone = tmp_path / "clone"
    run(["git", "clone", "-q", str(repository), str(clone)], tmp_path)
    assert not (clone / "data" / "06_models" / "baseline").exists()
    run(["dvc", "pull"], clone)
    for path in (
        "data/06_models/baseline/model.safetensors",
        "data/06_models/incremental/model.safetensors",
        "data/03_primary/jsonlines/test.english.384.jsonlines",
        "data/07_model_output/incremental.test.jsonlines",
    ):
        assert (clone / path).is_file(), path
        assert (clone / path).read_bytes() == (repository / path).read_bytes(), path
    assert "up to date" in run(["dvc", "status"], clone)
    assert stages_run(run(["dvc", "repro"], clone)) == set()

    # More pretraining text: a .txt file in the default folder re-runs pretrain, and the new encoder
    # directory is a changed dependency of coref_train (which fine-tunes it with encoder_from).
    (repository / "data" / "01_raw" / "pretrain_text" / "more.txt").write_text(
        "Ada wrote to Charles about the engine. He replied at once, and she read his letter twice. " * 20
    )
    status = json.loads(run(["dvc", "status", "--json"], repository).strip().splitlines()[-1])
    assert set(status) == {"pretrain"}, status
    assert stages_run(run(["dvc", "repro", "pretrain"], repository)) == {"pretrain"}
    status = json.loads(run(["dvc", "status", "--json"], repository).strip().splitlines()[-1])
    changed = [entry.get("changed deps", {}) for entry in status.get("coref_train", []) if isinstance(entry, dict)]
    assert any("data/06_models/pretrained_encoder" in deps for deps in changed), status
