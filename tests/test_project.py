"""The Kedro project as a user runs it: `kedro run` in a copy of the repository."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from coref_pipeline.formats.segmentation import check_document
from tests.paths import PROJECT_ROOT, copy_project


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
    # Each model's card (the Hub's format) holds the metrics files' figures and how the model was trained.
    for model, steps in (("baseline", 3), ("incremental", 2)):
        card = (reporting / f"model_card_{model}.md").read_text()
        header = yaml.safe_load(card[4:].split("\n---\n", 1)[0])
        (index,) = header["model-index"]
        assert index["name"] == f"sample-{model}" and header["library_name"] == "coref-pipeline"
        assert header["datasets"] == ["sample"]
        for result in index["results"]:
            split = result["dataset"]["split"]
            metrics = json.loads((reporting / f"metrics_{model}_{split}.json").read_text())
            assert {metric["type"]: metric["value"] for metric in result["metrics"]} == metrics
        assert [result["dataset"]["split"] for result in index["results"]] == ["dev", "test"]
        record = json.loads((project_copy / "data" / "06_models" / model / "training.json").read_text())
        assert record["steps"] == steps and record["overrides"]["max_steps"] == steps
        assert f"- {steps} steps (one document each)" in card and f"`max_steps: {steps}`" in card
    # Each model was asked the pronoun probes of evaluate.probes: each file's counts, by its name.
    for model in ("baseline", "incremental"):
        probes = json.loads((reporting / f"probes_{model}.json").read_text())
        assert {name: counts["probes"] for name, counts in probes.items()} == {
            "pronoun_probes": 60,
            "pronoun_probes_heldout": 20,
        }
        for counts in probes.values():
            assert 0 <= counts["right"] <= counts["linked"] <= counts["probes"], counts
    # Training scored dev as evaluate scores it: the same figures in both files.
    for model, training_file in (("baseline", "coref_train"), ("incremental", "incremental_train")):
        during_training = json.loads((reporting / f"{training_file}_dev_metrics.json").read_text())
        assert during_training == json.loads((reporting / f"metrics_{model}_dev.json").read_text())
        assert set(during_training) == {"conll_f1", "muc_f1", "bcub_f1", "ceafe_f1", "lea_f1"}


def cli_scores(key: Path, response: Path, remove_singletons: bool) -> dict[str, float]:
    """The ``coref-pipeline score`` command's figures on a response, in percent."""
    command = [sys.executable, "-m", "coref_pipeline", "score", str(key), str(response), "--json"]
    command += ["--metrics", "muc,bcub,ceafe,lea"] + (["--remove-singletons"] if remove_singletons else [])
    result = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    return {"conll_f1": 100 * result["conll_f1"], **{f"{m}_f1": 100 * v["f1"] for m, v in result["metrics"].items()}}


@pytest.mark.slow
def test_evaluate_scores_every_model_on_named_test_sets(project_copy):
    """Runs after the training test: two named sets (a CoNLL file, WinoBias's four) beside the corpus's test."""
    from tests.evaluation.test_test_sets import write_winobias

    sets = project_copy / "data" / "01_raw" / "test_sets"
    write_winobias(sets / "winobias", "test")
    sample_dev = project_copy / "data" / "01_raw" / "sample" / "dev.english.v4_gold_conll"
    local = project_copy / "conf" / "local" / "parameters_evaluate.yml"
    configured = {
        "sample_dev": {"path": str(sample_dev), "remove_singletons": True},
        "winobias": {"path": str(sets / "winobias"), "kind": "winobias"},
    }
    # A model named by parameter: a copy of the baseline's directory, which must score as the baseline does.
    copy = project_copy / "data" / "06_models" / "copy_of_baseline"
    shutil.copytree(project_copy / "data" / "06_models" / "baseline", copy)
    sample = yaml.safe_load(local.read_text())["evaluate"]  # the sample's own settings (conf/sample)
    local.write_text(yaml.safe_dump({"evaluate": {**sample, "test_sets": configured, "models": {"copy": str(copy)}}}))
    kedro(project_copy, "run", "--pipelines=evaluate")
    reporting, outputs = project_copy / "data" / "08_reporting", project_copy / "data" / "07_model_output"
    parts = [f"winobias.{part}" for part in ("type1_pro", "type1_anti", "type2_pro", "type2_anti")]
    summary = {(row["model"], row["set"]): row for row in csv.DictReader((reporting / "test_sets_summary.csv").open())}
    for model in ("baseline", "incremental"):
        folder = reporting / "test_sets" / model
        assert sorted(path.name for path in folder.iterdir()) == sorted(
            f"{n}.json" for n in ["test", "sample_dev", *parts]
        )
        assert json.loads((folder / "test.json").read_text()) == json.loads(
            (reporting / f"metrics_{model}_test.json").read_text()
        )
        for name in ["sample_dev", *parts]:
            metrics = json.loads((folder / f"{name}.json").read_text())
            response = outputs / "test_sets" / model / f"{name}.response.v4_gold_conll"
            assert (outputs / "test_sets" / model / f"{name}.scores.json").is_file()
            for suffix in ("breakdown.csv", "documents.parquet", "f1_by_length.png"):
                assert (outputs / "test_sets" / model / f"{name}.{suffix}").stat().st_size > 0
            key = (
                sample_dev
                if name == "sample_dev"
                else sets / "winobias" / f"test_{name.split('.')[1]}_stereotype.v4_auto_conll"
            )
            # Each metrics file is the command-line scorer's figures on that response (the set's singleton setting).
            expected = cli_scores(key, response, remove_singletons=name == "sample_dev")
            for metric, value in expected.items():
                assert metrics[metric] == pytest.approx(value, abs=1e-4), (model, name, metric)
            assert ("pronouns_linked" in metrics) == name.startswith("winobias")
        for name in ["test", "sample_dev", *parts]:  # the summary's numbers are the metrics files'
            metrics = json.loads((folder / f"{name}.json").read_text())
            row = summary[model, name]
            assert {metric: float(row[metric]) for metric in metrics if metric != "pronouns_linked"} == {
                metric: value for metric, value in metrics.items() if metric != "pronouns_linked"
            }
    named = reporting / "test_sets_models" / "copy"
    assert sorted(path.name for path in named.iterdir()) == sorted(f"{n}.json" for n in ["test", "sample_dev", *parts])
    for path in named.iterdir():
        assert json.loads(path.read_text()) == json.loads(
            (reporting / "test_sets" / "baseline" / path.name).read_text()
        )
        assert summary["copy", path.stem] == {**summary["baseline", path.stem], "model": "copy"}
    winobias = list(csv.DictReader((reporting / "winobias_summary.csv").open()))
    assert [(row["model"], row["set"]) for row in winobias] == [
        ("baseline", "winobias"),
        ("incremental", "winobias"),
        ("copy", "winobias"),
    ]
    assert "| model | test | sample_dev | winobias.type1_pro |" in (reporting / "test_sets_summary.md").read_text()
    assert (reporting / "test_sets_summary.png").stat().st_size > 0

    # A malformed set stops the run in one line naming the set and its file, before any model is loaded;
    # nothing written earlier changes.
    broken = sets / "broken.conll"
    broken.write_text("#begin document (d); part 000\nd\t0\t0\tword\n#end document\n")
    local.write_text(yaml.safe_dump({"evaluate": {"test_sets": {**configured, "broken": {"path": str(broken)}}}}))
    written = {path: path.stat().st_mtime_ns for path in reporting.rglob("*") if path.is_file()}
    result = kedro(project_copy, "run", "--pipelines=evaluate", check=False)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert f"test set 'broken': {broken}:2: " in " ".join(output.split())
    assert "Completed node" not in output and "baseline_model" not in output
    assert {path: path.stat().st_mtime_ns for path in reporting.rglob("*") if path.is_file()} == written
    # So does an unknown key of the model cards' settings, naming it.
    local.write_text(yaml.safe_dump({"model_card": {"licence": "mit"}}))
    result = kedro(project_copy, "run", "--pipelines=evaluate", check=False)
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0 and "model_card" in output and "licence" in output
    assert "Completed node" not in output
    assert {path: path.stat().st_mtime_ns for path in reporting.rglob("*") if path.is_file()} == written
    local.unlink()


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
    runs the tests' command as it is written there, in a fresh venv of its own made from the base interpreter."""
    readme = (PROJECT_ROOT / "README.md").read_text()
    section = readme.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    commands = [block.strip() for block in section.split("```bash")[1:]]
    commands = [block.split("```", 1)[0].strip() for block in commands]
    assert len(commands) == 2, commands
    main_job, tests = commands
    for command in commands:
        assert command.startswith("pip install -c requirements/lock.txt torch==2.13.0 -e "), command
    assert "kedro run --pipelines=preprocess,segment,coref_train,incremental_train,evaluate" in main_job
    # .ci/run: a fresh venv from the base interpreter, outside the checkout, activated, then the command as written.
    ci = (PROJECT_ROOT / ".ci" / "run").read_text().splitlines()
    assert f"{tests} || exit $?" in ci
    steps = [
        next(i for i, line in enumerate(ci) if "sys.base_prefix" in line),
        next(i for i, line in enumerate(ci) if line.startswith("environment=$(mktemp -d")),
        next(i for i, line in enumerate(ci) if line == '"$base_python" -m venv "$environment"'),
        next(i for i, line in enumerate(ci) if line == '. "$environment/bin/activate"'),
        ci.index(f"{tests} || exit $?"),
    ]
    assert steps == sorted(steps), steps
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
