"""Optimisers, schedules, resumable checkpoints and the training loop.

A run keeps its state in a work directory:

    checkpoints/step-000123/   weights, optimiser and scheduler state, RNG, position
    checkpoints/LATEST         name of the newest complete checkpoint (atomic)
    best/                      the best-on-dev model directory so far
    dvclive/                   training curves (DVCLive)

Each checkpoint is written to a temporary folder and renamed; ``LATEST`` is
replaced last. A run killed at any point restarts from ``LATEST`` with the
optimisers, schedulers, RNG states, epoch and position in the epoch restored.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn
from tqdm.auto import tqdm

from coref_pipeline.conll import atomic_write_text
from coref_pipeline.models.config import TrainingConfig
from coref_pipeline.models.document import DocumentTensors, random_crop
from coref_pipeline.models.serialization import atomic_save_tensors, atomic_write_json
from coref_pipeline.predict import CorefModel, score_predictions

logger = logging.getLogger(__name__)

NO_DECAY = ("bias", "LayerNorm.weight", "LayerNorm.bias", "layer_norm")


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch, and make torch's CPU kernels deterministic."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    logger.info("Seed %d applied", seed)


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
    finished: bool = False


@dataclass
class Optimisers:
    """The encoder's AdamW and the task parameters' Adam, each with its schedule."""

    encoder: torch.optim.Optimizer | None
    task: torch.optim.Optimizer
    encoder_schedule: torch.optim.lr_scheduler.LambdaLR | None
    task_schedule: torch.optim.lr_scheduler.LambdaLR
    encoder_parameters: list[nn.Parameter]
    task_parameters: list[nn.Parameter]

    def step(self, gradient_clip: float) -> None:
        """Clip each group's gradients (global norm), step, schedule, zero."""
        for parameters, optimiser, schedule in (
            (self.encoder_parameters, self.encoder, self.encoder_schedule),
            (self.task_parameters, self.task, self.task_schedule),
        ):
            if optimiser is None:
                continue
            if gradient_clip:
                torch.nn.utils.clip_grad_norm_(parameters, gradient_clip)
            optimiser.step()
            schedule.step()
            optimiser.zero_grad(set_to_none=True)

    def learning_rates(self) -> dict[str, float]:
        rates = {"task_learning_rate": self.task.param_groups[0]["lr"]}
        if self.encoder is not None:
            rates["bert_learning_rate"] = self.encoder.param_groups[0]["lr"]
        return rates

    def named(self) -> dict[str, torch.optim.Optimizer]:
        return {name: opt for name, opt in (("encoder", self.encoder), ("task", self.task)) if opt is not None}


def warmup_then_linear_decay(total_steps: int, warmup_steps: int) -> Callable[[int], float]:
    """Learning-rate factor: linear warm-up over ``warmup_steps``, then linear decay to 0 at ``total_steps``."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return factor


def _fused(parameters: Sequence[nn.Parameter]) -> bool | None:
    """Fused Adam kernels (several times faster on a CPU) where every parameter is a float tensor."""
    return True if parameters and all(p.dtype in (torch.float32, torch.float64) for p in parameters) else None


def build_optimisers(
    encoder: nn.Module | None,
    task_parameters: Sequence[nn.Parameter],
    config: TrainingConfig,
    total_steps: int,
    task_warmup: bool = False,
    task_schedule: str = "linear",
) -> Optimisers:
    """AdamW (weight decay, none on LayerNorm and bias) with warm-up for the encoder; Adam for the task.

    ``task_schedule`` is ``"linear"`` (decay to 0 at ``total_steps``, the baseline's) or ``"constant"``.
    """
    encoder_parameters: list[nn.Parameter] = []
    encoder_optimiser = encoder_schedule = None
    if encoder is not None:
        decay, no_decay = [], []
        for name, parameter in encoder.named_parameters():
            if parameter.requires_grad:
                (no_decay if any(marker in name for marker in NO_DECAY) else decay).append(parameter)
        encoder_parameters = decay + no_decay
        encoder_optimiser = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": config.weight_decay},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=config.bert_learning_rate,
            eps=config.adam_eps,
            fused=_fused(decay + no_decay),
        )
        warmup = int(total_steps * config.warmup_ratio)
        encoder_schedule = torch.optim.lr_scheduler.LambdaLR(
            encoder_optimiser, warmup_then_linear_decay(total_steps, warmup)
        )
    task_parameters = [p for p in task_parameters if p.requires_grad]
    task_optimiser = torch.optim.Adam(
        task_parameters, lr=config.task_learning_rate, eps=config.adam_eps, fused=_fused(task_parameters)
    )
    task_warmup_steps = int(total_steps * config.warmup_ratio) if task_warmup else 0
    if task_schedule == "linear":
        factor = warmup_then_linear_decay(total_steps, task_warmup_steps)
    elif task_schedule == "constant":
        factor = _constant
    else:
        raise ValueError(f"task_schedule must be 'linear' or 'constant', got {task_schedule!r}")
    task_scheduler = torch.optim.lr_scheduler.LambdaLR(task_optimiser, factor)
    return Optimisers(
        encoder_optimiser, task_optimiser, encoder_schedule, task_scheduler, encoder_parameters, task_parameters
    )


def _constant(step: int) -> float:
    return 1.0


# ------------------------------------------------------------------ checkpoints
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
    crop_generator: torch.Generator,
    keep: int = 1,
) -> Path:
    """A complete resumable checkpoint, written atomically; older ones beyond ``keep`` are removed."""
    checkpoints = work_dir / "checkpoints"
    checkpoints.mkdir(parents=True, exist_ok=True)
    name = f"step-{state.global_step:07d}"
    final = checkpoints / name
    temporary = checkpoints / f".{name}.tmp"
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir()
    atomic_save_tensors(model.state_dict(), temporary / "model.safetensors")
    optimiser_tensors: dict[str, torch.Tensor] = {}
    optimiser_meta = {}
    for prefix, optimiser in optimisers.named().items():
        tensors, meta = _optimiser_tensors(optimiser, prefix)
        optimiser_tensors.update(tensors)
        optimiser_meta[prefix] = meta
    rng = {
        "torch": torch.get_rng_state(),
        "crop": crop_generator.get_state(),
    }
    atomic_save_tensors(
        {**optimiser_tensors, **{f"rng.{k}": v for k, v in rng.items()}}, temporary / "state.safetensors"
    )
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
        temporary / "state.json",
    )
    shutil.rmtree(final, ignore_errors=True)
    os.replace(temporary, final)
    atomic_write_text(checkpoints / "LATEST", name)
    older = sorted(p for p in checkpoints.glob("step-*") if p.name != name)
    for path in older[: max(0, len(older) - (keep - 1))]:
        shutil.rmtree(path, ignore_errors=True)
    return final


def latest_checkpoint(work_dir: Path) -> Path | None:
    pointer = work_dir / "checkpoints" / "LATEST"
    if not pointer.is_file():
        return None
    path = work_dir / "checkpoints" / pointer.read_text(encoding="utf-8").strip()
    return path if path.is_dir() else None


def load_checkpoint(
    path: Path, model: nn.Module, optimisers: Optimisers, crop_generator: torch.Generator
) -> TrainState:
    """Restore weights, optimisers, schedules and RNG states; return the saved position."""
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
    torch.set_rng_state(tensors["rng.torch"])
    crop_generator.set_state(tensors["rng.crop"])
    version, internal, gauss = meta["python_rng"]
    random.setstate((version, tuple(internal), gauss))
    return TrainState(**meta["train_state"])


# ------------------------------------------------------------------ training loop
@dataclass
class TrainingHooks:
    """What the loop calls back: scoring on dev and saving the best model."""

    evaluate: Callable[[], dict[str, float]]  # -> metrics with "conll_f1" (percent)
    save_best: Callable[[], None]
    train_step: Callable[[DocumentTensors], float]  # forward and backward on one document; returns its loss


def epoch_order(num_documents: int, seed: int, epoch: int) -> list[int]:
    """The order of the training documents in an epoch: a permutation fixed by (seed, epoch)."""
    generator = torch.Generator().manual_seed(seed * 1000 + epoch)
    return torch.randperm(num_documents, generator=generator).tolist()


def train_loop(
    model: nn.Module,
    documents: Sequence[DocumentTensors],
    optimisers: Optimisers,
    hooks: TrainingHooks,
    config: TrainingConfig,
    work_dir: Path,
    max_segments: int | None,
    live: Any | None = None,
    interrupt_after_step: int | None = None,
) -> TrainState:
    """Train one document per step, resuming from the work directory's latest checkpoint.

    Each document is cropped to a random window of ``max_segments`` segments
    (``None``: whole documents).

    ``interrupt_after_step`` raises ``KeyboardInterrupt`` right after that step
    (used to test that a killed run resumes exactly).
    """
    crop_generator = torch.Generator().manual_seed(config.seed)
    state = TrainState()
    checkpoint = latest_checkpoint(work_dir)
    if checkpoint is not None:
        state = load_checkpoint(checkpoint, model, optimisers, crop_generator)
        logger.info(
            "Resuming from %s: epoch %d, document %d, step %d",
            checkpoint,
            state.epoch,
            state.position,
            state.global_step,
        )
    if state.finished:
        logger.info("Training already finished at step %d (best dev CoNLL F1 %.2f)", state.global_step, state.best_f1)
        return state
    total_steps = config.max_steps or config.num_epochs * len(documents)
    progress = tqdm(total=total_steps, initial=state.global_step, desc="train", unit="doc")
    running_loss, running_count, started = 0.0, 0, time.perf_counter()

    def evaluate_and_keep_best() -> bool:
        """Score on dev; save the best model; True when patience ran out."""
        model.eval()
        with torch.no_grad():
            metrics = hooks.evaluate()
        model.train()
        f1 = metrics["conll_f1"]
        if live is not None:
            for name, value in metrics.items():
                live.log_metric(f"dev/{name}", value)
        if f1 > state.best_f1:
            state.best_f1, state.best_step = f1, state.global_step
            state.evaluations_without_improvement = 0
            hooks.save_best()
            logger.info("Step %d: dev CoNLL F1 %.2f (best so far, saved)", state.global_step, f1)
        else:
            state.evaluations_without_improvement += 1
            logger.info(
                "Step %d: dev CoNLL F1 %.2f (best %.2f at step %d)",
                state.global_step,
                f1,
                state.best_f1,
                state.best_step,
            )
        return config.patience is not None and state.evaluations_without_improvement >= config.patience

    model.train()
    stop = False
    try:
        while state.epoch < config.num_epochs and not stop:
            order = epoch_order(len(documents), config.seed, state.epoch)
            while state.position < len(order):
                step_started = time.perf_counter()
                document = documents[order[state.position]]
                if max_segments is not None:
                    document = random_crop(document, max_segments, crop_generator)
                loss = hooks.train_step(document)
                optimisers.step(config.gradient_clip)
                state.train_seconds += time.perf_counter() - step_started
                state.position += 1
                state.global_step += 1
                running_loss += loss
                running_count += 1
                progress.update(1)
                if live is not None:
                    live.step = state.global_step
                    live.log_metric("train/loss", loss)
                    for name, value in optimisers.learning_rates().items():
                        live.log_metric(f"train/{name}", value)
                if state.global_step % config.report_frequency == 0:
                    seconds = time.perf_counter() - started
                    progress.set_postfix(
                        loss=f"{running_loss / running_count:.2f}", docs_s=f"{running_count / seconds:.2f}"
                    )
                    running_loss, running_count, started = 0.0, 0, time.perf_counter()
                reached_max = config.max_steps is not None and state.global_step >= config.max_steps
                if config.time_budget_minutes is not None and state.train_seconds >= 60 * config.time_budget_minutes:
                    logger.info(
                        "Time budget of %.1f minutes reached at step %d", config.time_budget_minutes, state.global_step
                    )
                    reached_max = True
                if state.global_step % config.eval_frequency == 0 or reached_max:
                    stop = evaluate_and_keep_best()
                if state.global_step % config.checkpoint_frequency == 0:
                    save_checkpoint(work_dir, model, optimisers, state, crop_generator)
                if live is not None:
                    live.next_step()
                if interrupt_after_step is not None and state.global_step == interrupt_after_step:
                    raise KeyboardInterrupt(f"interrupted after step {state.global_step}")
                if stop or reached_max:
                    stop = True
                    break
            if state.position >= len(order):
                state.epoch += 1
                state.position = 0
        if state.best_step != state.global_step and not stop:
            evaluate_and_keep_best()
        state.finished = True
        save_checkpoint(work_dir, model, optimisers, state, crop_generator)
    finally:
        progress.close()
    return state


# ------------------------------------------------------------------ a whole run
def fit_model(
    trained: CorefModel,
    train_documents: list[dict[str, Any]],
    dev_documents: list[dict[str, Any]],
    training: TrainingConfig,
    work_dir: Path,
    train_step: Callable[[DocumentTensors], float],
    build_run_optimisers: Callable[[int], Optimisers],
    max_segments: int | None,
    log_params: dict[str, Any] | None = None,
    interrupt_after_step: int | None = None,
    fingerprint_extra: str = "",
) -> CorefModel:
    """Train with resume from ``work_dir``, select on dev; return the best-on-dev model.

    ``train_step`` runs forward and backward on one document; ``build_run_optimisers``
    takes the total number of steps. ``fingerprint_extra`` adds to what makes a run
    the same run (e.g. the weights it starts from). With ``log_params`` the curves
    are logged with DVCLive under ``work_dir/dvclive``.
    """
    model = trained.model
    fingerprint = run_fingerprint(
        {"model_type": trained.model_type, **trained.config.to_dict(), "start": fingerprint_extra},
        training.to_dict(),
        train_documents,
        dev_documents,
    )
    prepare_work_dir(work_dir, fingerprint)
    train_tensors = [trained.tensorize(document) for document in train_documents]
    dev_subset = dev_documents[: training.eval_max_documents] if training.eval_max_documents else dev_documents
    dev_tensors = [trained.tensorize(document) for document in dev_subset]
    total_steps = training.max_steps or training.num_epochs * len(train_tensors)
    optimisers = build_run_optimisers(total_steps)
    best_dir = work_dir / "best"

    def evaluate() -> dict[str, float]:
        predictions = [
            {**document, "predicted_clusters": trained.predict_tensors(tensors)}
            for document, tensors in zip(dev_subset, dev_tensors, strict=True)
        ]
        scores = score_predictions(predictions, training.remove_singletons)
        return {"conll_f1": 100 * scores.conll_f1, **{f"{m}_f1": 100 * scores[m].f1 for m in ("muc", "bcub", "ceafe")}}

    hooks = TrainingHooks(evaluate=evaluate, save_best=lambda: trained.save(best_dir), train_step=train_step)
    with dvclive_logger(work_dir, log_params) as live:
        state = train_loop(
            model,
            train_tensors,
            optimisers,
            hooks,
            training,
            work_dir,
            max_segments,
            live=live,
            interrupt_after_step=interrupt_after_step,
        )
    logger.info("Best dev CoNLL F1 %.2f at step %d of %d", state.best_f1, state.best_step, state.global_step)
    return CorefModel.load(best_dir)


@contextmanager
def dvclive_logger(work_dir: Path, log_params: dict[str, Any] | None) -> Iterator[Any]:
    """A DVCLive logger in ``work_dir/dvclive`` (resumed with the run), or None without ``log_params``."""
    if log_params is None:
        yield None
        return
    from dvclive import Live

    with Live(dir=str(work_dir / "dvclive"), dvcyaml=False, save_dvc_exp=False, resume=True) as live:
        live.log_params(log_params)
        yield live


def run_fingerprint(model: dict[str, Any], training: dict[str, Any], *document_lists: list[dict[str, Any]]) -> str:
    """A hash of everything a run depends on: both configurations and the documents."""
    digest = hashlib.sha256(json.dumps([model, training], sort_keys=True).encode())
    for documents in document_lists:
        for document in documents:
            digest.update(json.dumps(document, sort_keys=True).encode())
    return digest.hexdigest()


def tensors_fingerprint(tensors: dict[str, torch.Tensor]) -> str:
    """A hash of named tensors (the weights a run starts from)."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        digest.update(name.encode())
        digest.update(tensors[name].detach().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def work_dir_from_params(params: dict[str, Any]) -> Path:
    """A pipeline's ``work_dir``, emptied first when ``restart`` is set."""
    work_dir = Path(params["work_dir"])
    if params.get("restart") and work_dir.exists():
        shutil.rmtree(work_dir)
    return work_dir


def prepare_work_dir(work_dir: Path, fingerprint: str) -> None:
    """Keep the work directory for a resume only if it belongs to the same run; else start afresh."""
    marker = work_dir / "run_fingerprint.txt"
    if work_dir.exists() and (not marker.is_file() or marker.read_text().strip() != fingerprint):
        logger.warning("%s holds a run with another configuration or data: starting a fresh run", work_dir)
        shutil.rmtree(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    marker.write_text(fingerprint + "\n")
