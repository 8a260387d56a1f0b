"""Resumable checkpoints of a run, and what makes two runs the same run.

A run keeps its state in a work directory:

    checkpoints/step-000123/   weights, optimiser and scheduler state, every rank's RNG, position
    checkpoints/LATEST         name of the newest complete checkpoint (atomic)
    best/                      the best-on-dev model directory so far
    dvclive/                   training curves (DVCLive)
    run_fingerprint.txt        what the run depends on (``run_fingerprint``)
    run.lock, run_holder.json  the OS lock of the live run holding the folder, and who that is
                               (``files.exclusive_directory``)

Each checkpoint is written to a temporary folder and renamed; ``LATEST`` is
replaced last. A run killed at any point restarts from ``LATEST`` with the
optimisers, schedulers, RNG states, epoch and position in the epoch restored.
Nothing is unpickled: tensors are safetensors, the rest JSON.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import random
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn

from coref_pipeline.files import (
    HOLDER_FILE,
    LOCK_FILE,
    atomic_directory,
    atomic_write_json,
    atomic_write_text,
    clear_directory,
    make_directory,
)
from coref_pipeline.models.serialization import atomic_save_tensors
from coref_pipeline.training.optim import Optimisers

logger = logging.getLogger(__name__)

PACKAGE_DIR = Path(__file__).resolve().parents[1]
# A run depends on this package and every module it imports, transitively (the same modules DVC lists
# as the training stages' code): a change in any of them makes a new run.
RUN_CODE = "training"


@dataclass
class TrainState:
    """Where a run is; saved with every checkpoint."""

    epoch: int = 0
    position: int = 0  # documents of this epoch already trained on
    global_step: int = 0
    best_f1: float = -1.0
    best_step: int = -1
    evaluations_without_improvement: int = 0
    train_seconds: float = 0.0  # time spent in training steps (evaluation excluded), over resumes
    eval_seconds: float = 0.0  # time spent in dev evaluations, over resumes
    evaluations: int = 0
    planned_steps: int = 0  # the step the schedules end at (fitted to a time budget as the run goes)
    finished: bool = False


def _optimiser_tensors(optimiser: torch.optim.Optimizer, prefix: str) -> tuple[dict[str, torch.Tensor], dict]:
    """An optimiser's state as named tensors plus JSON-able metadata (no pickle)."""
    state = optimiser.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for parameter_id, values in state["state"].items():
        for key, value in values.items():
            if torch.is_tensor(value):
                tensors[f"{prefix}.{parameter_id}.{key}"] = value
            else:
                scalars.setdefault(str(parameter_id), {})[key] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def _restore_optimiser(optimiser: torch.optim.Optimizer, prefix: str, tensors: dict, meta: dict) -> None:
    state: dict[int, dict[str, Any]] = {}
    for name, tensor in tensors.items():
        if not name.startswith(prefix + "."):
            continue
        _, parameter_id, key = name.split(".", 2)
        state.setdefault(int(parameter_id), {})[key] = tensor
    for parameter_id, values in meta["scalars"].items():
        state.setdefault(int(parameter_id), {}).update(values)
    optimiser.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


def save_checkpoint(
    work_dir: Path,
    model: nn.Module,
    optimisers: Optimisers,
    state: TrainState,
    rng_states: Mapping[str, torch.Tensor],
    keep: int = 1,
) -> Path:
    """A complete resumable checkpoint, written atomically; older ones beyond ``keep`` are removed.

    ``rng_states``: every process's generator states, one row per rank (``Engine.rng_states``).
    Only rank 0 calls this.
    """
    checkpoints = make_directory(work_dir / "checkpoints")
    name = f"step-{state.global_step:07d}"
    final = checkpoints / name
    with atomic_directory(final) as temporary:
        _write_checkpoint(temporary, model, optimisers, state, rng_states)
    atomic_write_text(checkpoints / "LATEST", name)
    older = sorted(p for p in checkpoints.glob("step-*") if p.name != name)
    for path in older[: max(0, len(older) - (keep - 1))]:
        shutil.rmtree(path, ignore_errors=True)
    return final


def _write_checkpoint(
    folder: Path,
    model: nn.Module,
    optimisers: Optimisers,
    state: TrainState,
    rng_states: Mapping[str, torch.Tensor],
) -> None:
    atomic_save_tensors(model.state_dict(), folder / "model.safetensors")
    optimiser_tensors: dict[str, torch.Tensor] = {}
    optimiser_meta = {}
    for prefix, optimiser in optimisers.named().items():
        tensors, meta = _optimiser_tensors(optimiser, prefix)
        optimiser_tensors.update(tensors)
        optimiser_meta[prefix] = meta
    rng = {f"rng.{name}": rows.contiguous() for name, rows in rng_states.items()}
    atomic_save_tensors({**optimiser_tensors, **rng}, folder / "state.safetensors")
    schedules = {
        name: schedule.state_dict()
        for name, schedule in (("encoder", optimisers.encoder_schedule), ("task", optimisers.task_schedule))
        if schedule is not None
    }
    for schedule in schedules.values():
        schedule.pop("lr_lambdas", None)
    python_rng = random.getstate()
    atomic_write_json(
        {
            "train_state": asdict(state),
            "optimisers": optimiser_meta,
            "schedules": schedules,
            "python_rng": [python_rng[0], list(python_rng[1]), python_rng[2]],
        },
        folder / "state.json",
    )


def latest_checkpoint(work_dir: Path) -> Path | None:
    pointer = work_dir / "checkpoints" / "LATEST"
    if not pointer.is_file():
        return None
    path = work_dir / "checkpoints" / pointer.read_text(encoding="utf-8").strip()
    return path if path.is_dir() else None


def load_checkpoint(path: Path, model: nn.Module, optimisers: Optimisers) -> tuple[TrainState, dict[str, torch.Tensor]]:
    """Restore weights, optimisers, schedules and Python's RNG; the position and every rank's RNG states."""
    model.load_state_dict(load_file(path / "model.safetensors"))
    tensors = load_file(path / "state.safetensors")
    meta = json.loads((path / "state.json").read_text(encoding="utf-8"))
    for prefix, optimiser in optimisers.named().items():
        _restore_optimiser(optimiser, prefix, tensors, meta["optimisers"][prefix])
    for name, schedule in (("encoder", optimisers.encoder_schedule), ("task", optimisers.task_schedule)):
        if schedule is not None:
            schedule.load_state_dict({**schedule.state_dict(), **meta["schedules"][name]})
            for group, lr in zip(schedule.optimizer.param_groups, schedule.get_last_lr(), strict=True):
                group["lr"] = lr
    version, internal, gauss = meta["python_rng"]
    random.setstate((version, tuple(internal), gauss))
    rng_states = {name[len("rng.") :]: rows for name, rows in tensors.items() if name.startswith("rng.")}
    return TrainState(**meta["train_state"]), rng_states


def _module_file(package_dir: Path, name: str) -> Path | None:
    path = package_dir.joinpath(*name.split(".")[1:])
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def _imported_modules(path: Path, module: str, package: str) -> set[str]:
    """The modules of ``package`` that ``path`` (module ``module``) imports, read from its source."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: None if path.name == "__init__.py" else -1]
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith(package + ".")}


def code_files(start: str = RUN_CODE, package_dir: Path | None = None) -> list[Path]:
    """The source files of ``package.start`` and of every package module it imports, transitively."""
    package_dir = package_dir or PACKAGE_DIR
    package = package_dir.name
    seen: set[str] = set()
    files: set[Path] = set()
    todo = [f"{package}.{start}"]
    while todo:
        name = todo.pop()
        path = _module_file(package_dir, name)
        if name in seen or path is None:
            continue
        seen.add(name)
        files.add(path)
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(2, len(parts)))  # parent packages run too
        todo.extend(_imported_modules(path, name, package))
    return sorted(files)


def code_fingerprint(start: str = RUN_CODE) -> str:
    """SHA-256 of the code a training run executes: ``training`` and every package module it imports."""
    digest = hashlib.sha256()
    for path in code_files(start):
        digest.update(path.relative_to(PACKAGE_DIR).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def run_fingerprint(
    model: Mapping[str, Any],
    training: Mapping[str, Any],
    *document_lists: Sequence[Mapping[str, Any]],
    code: str = RUN_CODE,
) -> str:
    """A hash of everything a run depends on: the code (``code`` and what it imports), both configurations and
    the documents."""
    digest = hashlib.sha256(json.dumps([code_fingerprint(code), model, training], sort_keys=True).encode())
    for documents in document_lists:
        for document in documents:
            digest.update(json.dumps(document, sort_keys=True).encode())
    return digest.hexdigest()


def tensors_fingerprint(tensors: Mapping[str, torch.Tensor]) -> str:
    """A hash of named tensors (the weights a run starts from)."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        digest.update(name.encode())
        digest.update(tensors[name].detach().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


FINGERPRINT_FILE = "run_fingerprint.txt"


def prepare_work_dir(
    work_dir: Path, fingerprint: str, restart: bool = False, checkpoint_frequency: int | None = None
) -> None:
    """Keep the work directory for a resume only if it holds a checkpoint of the same run; else start afresh.

    Starting afresh over an earlier run's files says why: ``restart``, another run (configuration,
    data or code), or the same run killed before its first checkpoint (written every
    ``checkpoint_frequency`` steps). The lock of the run holding the folder is kept.
    """
    marker = work_dir / FINGERPRINT_FILE
    make_directory(work_dir)
    kept = [entry for entry in work_dir.iterdir() if entry.name not in (LOCK_FILE, HOLDER_FILE)]
    reason = None
    if kept and restart:
        reason = "restart requested"
    elif kept and (not marker.is_file() or marker.read_text(encoding="utf-8").strip() != fingerprint):
        reason = "it holds a run with another configuration, data or code"
    elif kept and latest_checkpoint(work_dir) is None:
        every = (
            f" (one is written every {checkpoint_frequency} steps: checkpoint_frequency)"
            if checkpoint_frequency
            else ""
        )
        reason = f"the earlier run of this configuration stopped before its first checkpoint{every}"
    if reason is not None:
        logger.warning("%s: starting a fresh run from step 0: %s", work_dir, reason)
        clear_directory(work_dir)
    atomic_write_text(marker, fingerprint + "\n")


def has_original_optimiser(directory: str | Path) -> bool:
    """Whether a model directory holds the original's optimiser state (``import-tf-checkpoint --optimizer-state``)."""
    from coref_pipeline.original.tf_import import OPTIMISER_STATE_FILE, OPTIMISER_STATE_TENSORS

    return (Path(directory) / OPTIMISER_STATE_FILE).is_file() and (Path(directory) / OPTIMISER_STATE_TENSORS).is_file()


def restore_original_optimiser(directory: str | Path, model: nn.Module, optimisers: Optimisers) -> TrainState:
    """The original's optimiser state in model ``directory`` (``import-tf-checkpoint --optimizer-state``) in
    ``optimisers`` (``optimiser: original``, built for ``model``), and the state a run continuing it starts from:
    at the checkpoint's ``global_step``, its schedule the original's (``num_docs * num_epochs`` steps), so that
    the next step is the one the original would take."""
    from coref_pipeline.original.tf_import import OPTIMISER_STATE_FILE, OPTIMISER_STATE_TENSORS

    directory = Path(directory)
    meta = json.loads((directory / OPTIMISER_STATE_FILE).read_text(encoding="utf-8"))
    tensors = load_file(str(directory / OPTIMISER_STATE_TENSORS))
    global_step, task_steps = int(meta["global_step"]), int(meta["task_adam_steps"])
    names = {parameter: name for name, parameter in model.named_parameters()}
    for optimiser, steps in ((optimisers.encoder, global_step), (optimisers.task, task_steps)):
        if optimiser is None:
            continue
        for group in optimiser.param_groups:
            for parameter in group["params"]:
                name = names[parameter]
                if f"{name}.exp_avg" not in tensors:
                    continue  # no slots there: it starts from zeros, as the original's own would
                optimiser.state[parameter] = {
                    "step": torch.tensor(float(steps)),
                    "exp_avg": tensors[f"{name}.exp_avg"].to(parameter.device, torch.float32),
                    "exp_avg_sq": tensors[f"{name}.exp_avg_sq"].to(parameter.device, torch.float32),
                }
    for schedule in (optimisers.encoder_schedule, optimisers.task_schedule):
        if schedule is not None:
            schedule.last_epoch = global_step
    optimisers.follow_plan()
    return TrainState(global_step=global_step, planned_steps=int(meta["num_train_steps"]))
