"""The Kedro project as a user runs it: `kedro run` in a copy of the repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from coref_pipeline.segmentation import check_document

from .paths import PROJECT_ROOT, copy_project


@pytest.fixture(scope="module")
def project_copy(tmp_path_factory) -> Path:
    """The repository's configuration and embedded data in a fresh folder."""
    return copy_project(tmp_path_factory.mktemp("project"))


def kedro(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "kedro", *args]
    result = subprocess.run(
        command, cwd=root, capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "300"}
    )
    if check:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_preprocess_and_segment_write_what_the_chosen_preset_reads(project_copy):
    kedro(project_copy, "run", "--pipelines=preprocess,segment")
    for split in ("train", "dev", "test"):
        assert (project_copy / "data" / "02_intermediate" / f"{split}.word_documents.parquet").is_file()
    jsonlines = project_copy / "data" / "03_primary" / "jsonlines"
    # cpu_minilm reads 384-subtoken segments of the MiniLM tokenizer: that, and only that, is written.
    assert sorted(path.name for path in jsonlines.iterdir()) == [
        f"{s}.english.384.jsonlines" for s in ("dev", "test", "train")
    ]
    for path in jsonlines.iterdir():
        documents = [json.loads(line) for line in path.read_text().splitlines()]
        assert documents, path
        for document in documents:
            check_document(document, 384)
    record = json.loads((project_copy / "data" / "03_primary" / "segmentation.json").read_text())
    assert (record["tokenizer"], record["max_segment_lens"], record["language"]) == (
        "embedded:minilm",
        [384],
        "english",
    )


@pytest.mark.slow
def test_train_and_evaluate_with_the_embedded_encoder(project_copy):
    """coref_train + incremental_train + evaluate end to end with the packaged MiniLM, cut to a few steps."""
    overrides = ",".join(
        [
            "coref_train.overrides.max_steps=3",
            "coref_train.overrides.eval_frequency=3",
            "incremental_train.overrides.max_steps=2",
            "incremental_train.overrides.eval_frequency=2",
        ]
    )
    kedro(project_copy, "run", "--pipelines=coref_train,incremental_train,evaluate", "--params", overrides)
    reporting = project_copy / "data" / "08_reporting"
    for model in ("baseline", "incremental"):
        model_dir = project_copy / "data" / "06_models" / model
        assert (model_dir / "model.safetensors").is_file() and (model_dir / "tokenizer").is_dir()
        assert json.loads((model_dir / "coref_config.json").read_text())["model_type"] == model
        for split in ("dev", "test"):
            metrics = json.loads((reporting / f"metrics_{model}_{split}.json").read_text())
            assert 0 <= metrics["conll_f1"] <= 100
            assert (reporting / f"f1_by_length_{model}_{split}.png").stat().st_size > 0
    # Training scored dev as evaluate scores it: the same figures in both files.
    for model, training_file in (("baseline", "coref_train"), ("incremental", "incremental_train")):
        during_training = json.loads((reporting / f"{training_file}_dev_metrics.json").read_text())
        assert during_training == json.loads((reporting / f"metrics_{model}_dev.json").read_text())
        assert set(during_training) == {"conll_f1", "muc_f1", "bcub_f1", "ceafe_f1", "lea_f1"}


@pytest.mark.slow
def test_evaluate_without_a_trained_model_says_what_to_run(project_copy):
    """Runs after the training test: without the incremental model, evaluate names it and the way out."""
    shutil.rmtree(project_copy / "data" / "06_models" / "incremental")
    result = kedro(project_copy, "run", "--pipelines=evaluate", check=False)
    assert result.returncode != 0
    output = " ".join((result.stdout + result.stderr).split())
    assert "incremental_model" in output and "run `kedro run --pipelines=incremental_train` first" in output
    assert "baseline_model" not in output.split("MissingPrerequisiteError")[-1]
    assert "`kedro run --pipelines=evaluate --tags=baseline`" in output
    kedro(project_copy, "run", "--pipelines=evaluate", "--tags=baseline")


def test_runtime_params_keep_sibling_keys(project_copy):
    """merge_strategy soft: overriding one key leaves the others of `segment` in place."""
    kedro(project_copy, "run", "--pipelines=segment", "--params", "segment.language=xx,segment.max_segment_lens=[128]")
    names = sorted(p.name for p in (project_copy / "data" / "03_primary" / "jsonlines").iterdir())
    # PartitionedDataset overwrites: only the new names remain; the other segment keys kept their values.
    assert names == sorted(f"{s}.xx.128.jsonlines" for s in ("dev", "test", "train"))
    record = json.loads((project_copy / "data" / "03_primary" / "segmentation.json").read_text())
    assert (record["tokenizer"], record["language"]) == ("embedded:minilm", "xx")
    kedro(project_copy, "run", "--pipelines=segment")  # back to the committed parameters for the other tests


def test_settings_and_telemetry():
    from coref_pipeline import settings

    assert settings.CONFIG_LOADER_ARGS["merge_strategy"] == {"parameters": "soft"}
    assert yaml.safe_load((PROJECT_ROOT / ".telemetry").read_text()) == {"consent": False}


def test_the_readme_gives_two_set_up_commands_and_ci_runs_the_second_exactly():
    """The README's set-up section: the main job's command and the tests' command, both from the lock; .ci/run
    runs the tests' command as it is written there."""
    readme = (PROJECT_ROOT / "README.md").read_text()
    section = readme.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    commands = [block.strip() for block in section.split("```bash")[1:]]
    commands = [block.split("```", 1)[0].strip() for block in commands]
    assert len(commands) == 2, commands
    main_job, tests = commands
    for command in commands:
        assert command.startswith("pip install -c requirements/lock.txt torch==2.13.0 -e "), command
    assert "kedro run --pipelines=preprocess,segment,coref_train,incremental_train,evaluate" in main_job
    assert tests in (PROJECT_ROOT / ".ci" / "run").read_text().splitlines()
    assert (PROJECT_ROOT / "requirements" / "lock.txt").is_file()


def test_every_dependency_is_pinned_in_the_lock():
    """A dependency added to pyproject.toml without refreshing requirements/lock.txt (README: the uv command)."""
    import re

    import tomllib

    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    pinned = {
        re.split(r"[=;\s]", line, maxsplit=1)[0].lower().replace("_", "-")
        for line in (PROJECT_ROOT / "requirements" / "lock.txt").read_text().splitlines()
        if "==" in line and not line.startswith((" ", "#"))
    }
    names = {re.split(r"[\[<>=!~;\s]", requirement, maxsplit=1)[0].lower().replace("_", "-") for requirement in wanted}
    assert names - pinned == set()
