"""Kedro hooks of the project: a run whose inputs do not exist yet says what to run first; a run that
scores named test sets reads them all before any model runs; on a multi-process run started by torchrun
or SLURM, only rank 0 saves the pipeline's outputs."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml
from kedro.framework.hooks import hook_impl

from coref_pipeline.errors import UserError
from coref_pipeline.runtime.processes import launched_rank

CORPUS_FROM_ONTONOTES = "ontonotes"  # the pipeline that writes the raw corpus (run by name only)


class MissingPrerequisiteError(UserError, RuntimeError):
    """A pipeline's input that no earlier run has written; the message says which run writes it."""


def _producers(dataset: str, registered: dict[str, Any]) -> list[str]:
    return sorted(name for name, pipeline in registered.items() if dataset in pipeline.all_outputs())


def _location(catalog: Any, dataset: str) -> str | None:
    """The file or folder a dataset reads, when its description names one."""
    try:
        description = catalog.get(dataset)._describe()
    except Exception:  # noqa: BLE001 - a location is only a courtesy
        return None
    where = description.get("filepath") or description.get("path")
    return str(where) if where else None


def _describe(catalog: Any, dataset: str) -> str:
    where = _location(catalog, dataset)
    return f"{dataset} ({where})" if where else dataset


def _corpus_setting(run_params: dict[str, Any]) -> str:
    """The configuration file that names the corpus: the run environment's globals.yml when it sets one."""
    project = Path(run_params.get("project_path") or ".")
    environment = run_params.get("env") or "local"
    local = Path("conf") / environment / "globals.yml"
    try:
        if "corpus" in (yaml.safe_load((project / local).read_text(encoding="utf-8")) or {}):
            return local.as_posix()
    except (OSError, yaml.YAMLError, TypeError):
        pass
    return "conf/base/globals.yml"


def _raw_input_fault(catalog: Any, dataset: str, setting: str) -> str:
    """Why a raw input (one no pipeline writes) cannot be read: absent, or a folder where a file belongs."""
    where = _location(catalog, dataset)
    if where is not None and Path(where).is_dir():
        return f"{dataset} ({where}) is a directory, not a CoNLL file (the corpus is named in {setting})"
    return f"{_describe(catalog, dataset)}: no such file (the corpus is named in {setting})"


class PrerequisitesHook:
    """Before a run, every free input of the pipeline must exist (raw data, or another pipeline's output)."""

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        missing = [
            name for name in sorted(pipeline.inputs()) if not name.startswith("params:") and not catalog.exists(name)
        ]
        if not missing:
            return
        from coref_pipeline.pipeline_registry import every_pipeline

        registered = every_pipeline()
        by_producer: dict[str, list[str]] = {}
        raw_faults: list[str] = []
        setting = _corpus_setting(run_params)
        for name in missing:
            producers = _producers(name, registered)
            if producers and producers != [CORPUS_FROM_ONTONOTES]:
                by_producer.setdefault(producers[0], []).append(_describe(catalog, name))
            elif producers:  # the raw corpus, which ontonotes writes only when asked
                raw_faults.append(
                    _raw_input_fault(catalog, name, setting)
                    + f", or `kedro run --pipelines={CORPUS_FROM_ONTONOTES}` writes it from OntoNotes"
                )
            else:
                raw_faults.append(_raw_input_fault(catalog, name, setting))
        steps = [
            *raw_faults,
            *(
                f"{', '.join(names)}: run `kedro run --pipelines={producer}` first"
                for producer, names in by_producer.items()
            ),
        ]
        message = "this run needs what no run has written yet: " + "; ".join(steps)
        absent = {name.removesuffix("_model") for name in missing if name.endswith("_model")}
        present = [m for m in ("baseline", "incremental") if f"{m}_model" in pipeline.inputs() and m not in absent]
        if absent and present:
            run = " ".join(["kedro run", *(f"--pipelines={n}" for n in run_params.get("pipeline_names") or [])])
            message += f"; or run it for the {' and '.join(present)} model alone: `{run} --tags={','.join(present)}`"
        raise MissingPrerequisiteError(message)


class RankZeroWritesHook:
    """Every rank of a torchrun or SLURM launch runs the whole `kedro run`; only rank 0 saves its outputs.

    On the other ranks each output dataset of the pipeline is replaced by an in-memory one
    (the training itself already writes from rank 0 only). Runs that Fabric spawns from one
    `kedro run` need nothing: the workers are not Kedro runs.
    """

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        rank = launched_rank()
        if rank == 0:
            return
        from kedro.io import MemoryDataset

        for name in sorted(pipeline.all_outputs()):
            catalog[name] = MemoryDataset()
        logging.getLogger(__name__).info("Rank %d: the pipeline's outputs are saved by rank 0 only", rank)


class TestSetsHook:
    """Before a run that scores the named test sets (``evaluate.test_sets``), every set is read and parsed and
    every named model (``evaluate.models``) found: a missing or malformed one stops the run in one line naming
    the set and the file (or the model), before any model is loaded and before any output is written. The
    model cards' settings (``model_card``) are checked there too."""

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Any, catalog: Any) -> None:
        if not any(node.name.endswith("_test_sets") and node.name.startswith("score_") for node in pipeline.nodes):
            return
        from coref_pipeline.evaluation.report import EvaluateSettings
        from coref_pipeline.evaluation.test_sets import read_test_sets
        from coref_pipeline.sharing.model_card import ModelCardSettings
        from coref_pipeline.studies.cross_corpus import check_named_models

        settings = EvaluateSettings.from_dict(catalog.load("params:evaluate"))
        read_test_sets(settings.test_sets, settings.remove_singletons)
        check_named_models(settings.models)
        ModelCardSettings.from_dict(catalog.load("params:model_card"))
