"""One training step and one loop, for both models.

``training_step`` is the only place that backpropagates: it takes a model's
losses for one document (the baseline gives one, the incremental model one per
segment, each to be backpropagated before the next is computed), then clips,
steps and schedules. ``train_loop`` orders the documents, crops them, evaluates
on dev, keeps the best model and writes resumable checkpoints; what watches a run
(DVCLive curves, a test that interrupts it) is a :class:`TrainingCallback`.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from coref_pipeline.evaluation.predictions import GoldKey, score_predictions, summary_metrics
from coref_pipeline.files import exclusive_directory
from coref_pipeline.formats.corpus import SINGLETON_CORPUS_SHARE, SegmentedCorpus, singleton_share
from coref_pipeline.models.config import (
    AUTO,
    FULL_HEAD,
    ConfigError,
    ConfigT,
    TrainingConfig,
    resolve_head,
    resolve_mention_loss,
)
from coref_pipeline.models.directory import training_time, write_training_record
from coref_pipeline.models.document import DocumentTensors, random_crop
from coref_pipeline.models.encoder import SegmentEncoder
from coref_pipeline.runtime.devices import bound_host_memory, resolve_device, resolve_precision
from coref_pipeline.runtime.processes import launched_rank
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.training.checkpoints import (
    TrainState,
    latest_checkpoint,
    load_checkpoint,
    prepare_work_dir,
    run_fingerprint,
    save_checkpoint,
)
from coref_pipeline.training.engine import Engine, rank_seed, shard, steps_per_epoch
from coref_pipeline.training.optim import Optimisers, StepPlan

logger = logging.getLogger(__name__)

# A model's training losses for one document, each backpropagated in turn.
LossFunction = Callable[[DocumentTensors], Iterable[torch.Tensor]]
# What a training item becomes before its step, drawn from the run's resumable generator (a crop, masks).
Prepare = Callable[[Any, torch.Generator], Any]


class RandomCrop:
    """A training document cropped to a random window of ``max_segments`` segments (picklable, for spawned ranks)."""

    def __init__(self, max_segments: int) -> None:
        self.max_segments = max_segments

    def __call__(self, document: DocumentTensors, generator: torch.Generator) -> DocumentTensors:
        return random_crop(document, self.max_segments, generator)


def cropping(max_segments: int | None) -> Prepare | None:
    """Each training document cropped to ``max_segments`` segments; None: whole documents."""
    return None if max_segments is None else RandomCrop(max_segments)


@dataclass(frozen=True)
class Selection:
    """The evaluation metric that selects the best model (higher is better) and its name in the log."""

    key: str = "conll_f1"
    label: str = "dev CoNLL F1"


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch, and make torch's CPU kernels deterministic."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    logger.info("Seed %d applied", seed)


def epoch_order(num_documents: int, seed: int, epoch: int) -> list[int]:
    """The order of the training documents in an epoch: a permutation fixed by (seed, epoch)."""
    generator = torch.Generator(device="cpu").manual_seed(seed * 1000 + epoch)
    return torch.randperm(num_documents, generator=generator, device="cpu").tolist()


def configure_encoder_for_training(encoder: SegmentEncoder, training: TrainingConfig) -> None:
    """The encoder as transformers' own model (a loaded model's may be the inference one), the training key that
    changes it (gradient checkpointing), and its attention's cheaper dropout mask on a CPU (models/attention.py)."""
    encoder.make_trainable()
    if training.gradient_checkpointing:
        encoder.enable_gradient_checkpointing()
    encoder.use_cpu_attention_dropout()


def steps_at_most(config: TrainingConfig, num_documents: int, world_size: int) -> int:
    """The steps a run takes at most: ``max_steps``, else ``num_epochs`` epochs of the ranks' shards."""
    return config.max_steps or config.num_epochs * steps_per_epoch(num_documents, world_size)


def budget_plan(state: TrainState, config: TrainingConfig, most_steps: int) -> int:
    """The step a time-budgeted run ends at: the furthest step whose cost still fits in the budget.

    Called after each step, before that step's evaluation. The budget
    (``time_budget_minutes``) is training and dev evaluation together. The steps left cost
    the mean measured step time each, and the evaluations left (every ``eval_frequency``-th
    step from this one on, and one at the last step) the mean measured evaluation time
    each. Never beyond ``most_steps`` (the epochs, or ``max_steps``), never before the
    current step.
    """
    step = state.global_step
    if step == 0:
        return most_steps
    per_step = state.train_seconds / step
    per_evaluation = state.eval_seconds / state.evaluations if state.evaluations else 0.0
    left = 60 * config.time_budget_minutes - state.train_seconds - state.eval_seconds
    every = config.eval_frequency

    def cost(more: int) -> float:
        end = step + more
        evaluations = end // every - (step - 1) // every + (1 if end % every else 0)
        evaluations += 1 if state.evaluations == 0 and step % every else 0  # the one that times it
        return more * per_step + evaluations * per_evaluation

    low, high = 0, most_steps - step  # the largest `more` with cost(more) <= left (cost grows with it)
    if high <= 0:
        return step
    while low < high:
        middle = (low + high + 1) // 2
        if cost(middle) <= left:
            low = middle
        else:
            high = middle - 1
    return step + low


def training_step(
    losses: LossFunction,
    document: DocumentTensors,
    optimisers: Optimisers,
    gradient_clip: float,
    engine: Engine,
    clip_each_loss: bool = False,
) -> float:
    """Forward and backward over the document's losses, then clip, step and schedule; the summed loss.
    ``clip_each_loss``: every parameter's accumulated gradients are also clipped after each backward.

    Each loss is computed under the engine's autocast and backpropagated (outside it)
    before the next is computed. With several ranks the gradients accumulate locally
    and are averaged across ranks once, before the optimisers step.
    """
    values = []  # each loss, detached: read back once, after the step (not once per loss)
    with engine.accumulate():
        iterator = iter(losses(document))
        while True:
            with engine.autocast():
                loss = next(iterator, None)
            if loss is None:
                break
            engine.backward(loss)
            if clip_each_loss and gradient_clip:
                torch.nn.utils.clip_grad_norm_(
                    optimisers.encoder_parameters + optimisers.task_parameters, gradient_clip
                )
            values.append(loss.detach())
    engine.synchronise_gradients()
    optimisers.step(gradient_clip, engine)
    bound_host_memory()  # the heap's free part kept for the next steps, within a bound
    total = 0.0
    for value in torch.stack([value.float() for value in values]).tolist() if values else []:
        total += value
    return total


class TrainingCallback:
    """What watches a run: each method is called by ``train_loop`` at that point (all optional)."""

    def on_train_start(self, state: TrainState) -> None:
        """Before the first step (of a fresh or a resumed run)."""

    def on_step_end(self, state: TrainState, loss: float, learning_rates: dict[str, float]) -> None:
        """After each optimiser step and its evaluation and checkpoint, if any (the scheduled next rates)."""

    def on_evaluation(self, state: TrainState, metrics: dict[str, float]) -> None:
        """After each dev evaluation (``metrics`` in percent, with the selection's key)."""

    def on_report(self, state: TrainState, statistics: dict[str, float]) -> None:
        """Every ``report_frequency`` steps: the recipe's running statistics (e.g. each loss, an accuracy)."""

    def on_train_end(self, state: TrainState) -> None:
        """When the run ends (finished, or stopped by an exception)."""


class DvcLiveCallback(TrainingCallback):
    """Training curves with DVCLive in ``directory`` (resumed with the run): loss, learning rates, dev metrics."""

    def __init__(self, directory: Path, params: dict[str, Any], evaluation_prefix: str = "dev") -> None:
        self.directory = directory
        self.params = params
        self.evaluation_prefix = evaluation_prefix
        self.live: Any = None

    def on_train_start(self, state: TrainState) -> None:
        from dvclive import Live

        self.live = Live(dir=str(self.directory), dvcyaml=False, save_dvc_exp=False, resume=True)
        self.live.log_params(self.params)

    def on_evaluation(self, state: TrainState, metrics: dict[str, float]) -> None:
        self.live.step = state.global_step
        for name, value in metrics.items():
            self.live.log_metric(f"{self.evaluation_prefix}/{name}", value)

    def on_report(self, state: TrainState, statistics: dict[str, float]) -> None:
        self.live.step = state.global_step
        for name, value in statistics.items():
            self.live.log_metric(f"train/{name}", value)

    def on_step_end(self, state: TrainState, loss: float, learning_rates: dict[str, float]) -> None:
        self.live.step = state.global_step
        self.live.log_metric("train/loss", loss)
        for name, value in learning_rates.items():
            self.live.log_metric(f"train/{name}", value)
        self.live.next_step()

    def on_train_end(self, state: TrainState) -> None:
        if self.live is not None:
            self.live.end()
            self.live = None


def train_loop(
    model: torch.nn.Module,
    documents: Sequence[DocumentTensors],
    losses: LossFunction,
    optimisers: Optimisers,
    evaluate: Callable[[], dict[str, float]],
    save_best: Callable[[], None],
    config: TrainingConfig,
    work_dir: Path,
    prepare: Prepare | None,
    callbacks: Sequence[TrainingCallback] = (),
    engine: Engine | None = None,
    plan: StepPlan | None = None,
    clock: Callable[[], float] = time.perf_counter,
    selection: Selection = Selection(),
    report: Callable[[], dict[str, float]] | None = None,
    description: str = "train",
    clip_each_loss: bool = False,
    start: Callable[[Optimisers], TrainState] | None = None,
) -> TrainState:
    """Train one document per step and rank, resuming from the work directory's latest checkpoint.

    ``plan`` holds the step the run and its schedules end at (the optimisers' schedules
    read it): ``max_steps`` or the epochs, or, with ``time_budget_minutes``, re-fitted after
    every step to what the budget still pays for (``budget_plan``), so that the decay ends
    and the last evaluation happens when the budget does. ``clock`` times steps and
    evaluations (seconds).

    Each epoch's order is sharded across the engine's ranks (one document each per
    step). ``prepare`` makes each document what its step takes (a random crop, masks), from a generator of
    each rank's own that checkpoints keep (``None``: as it is).
    ``evaluate`` scores on dev (with ``selection.key``, higher is better) and ``save_best`` keeps
    the model when it is the best so far: both on rank 0, as the checkpoints and
    the callbacks; the other ranks wait and take its decisions. ``start`` (without a checkpoint in ``work_dir``)
    puts a state to continue in the optimisers and gives the run's first state (the original's optimiser state
    of an imported model: its step and schedule). With ``eval_on_start`` the starting
    weights are scored (and may be kept as the best) before the first step. ``report`` gives running
    statistics every ``report_frequency`` steps (shown on the progress bar and given to the callbacks).
    """
    engine = engine or Engine(replace(config, devices=1, num_nodes=1))
    rank, world_size = engine.rank, engine.world_size
    crop_generator = torch.Generator(device="cpu").manual_seed(rank_seed(config.seed, rank))
    if rank:
        torch.manual_seed(rank_seed(config.seed, rank))  # dropout and sampling differ by rank
    main = engine.is_main
    callbacks = callbacks if main else ()
    state = TrainState()
    checkpoint = latest_checkpoint(work_dir)
    if checkpoint is not None:
        state, rng_states = load_checkpoint(checkpoint, model, optimisers)
        engine.restore_rng_states(rng_states, [crop_generator])
        logger.info(
            "Resuming from %s: epoch %d, document %d, step %d",
            checkpoint,
            state.epoch,
            state.position,
            state.global_step,
        )
    elif start is not None:
        state = start(optimisers)
    if state.finished:
        logger.info("Training already finished at step %d (best dev CoNLL F1 %.2f)", state.global_step, state.best_f1)
        return state
    at_most = steps_at_most(config, len(documents), world_size)
    plan = plan or StepPlan(at_most, config.warmup_ratio)
    if state.planned_steps:
        plan.total_steps = state.planned_steps  # a resumed run keeps its plan
        optimisers.follow_plan()
    state.planned_steps = plan.total_steps
    if checkpoint is None and start is not None:
        logger.info(
            "Continuing the original's optimiser state at step %d of %d: learning rates %s",
            state.global_step,
            plan.total_steps,
            ", ".join(f"{name} {rate:.6g}" for name, rate in optimisers.learning_rates().items()),
        )

    def write_checkpoint() -> None:
        rng_states = engine.rng_states([crop_generator])  # every rank's, gathered
        if main:
            save_checkpoint(work_dir, model, optimisers, state, rng_states)
        engine.barrier()

    def evaluate_and_keep_best() -> bool:
        """Score on dev on rank 0; save the best model; True (on every rank) when patience ran out."""
        stop = False
        if main:
            started = clock()
            with engine.all_node_cores():
                model.eval()
                with torch.no_grad():
                    metrics = evaluate()
                model.train()
                f1 = metrics[selection.key]
                improved = f1 > state.best_f1
                if improved:
                    save_best()
            state.eval_seconds += clock() - started
            state.evaluations += 1
            for callback in callbacks:
                callback.on_evaluation(state, metrics)
            if improved:
                state.best_f1, state.best_step = f1, state.global_step
                state.evaluations_without_improvement = 0
                logger.info("Step %d: %s %.2f (best so far, saved)", state.global_step, selection.label, f1)
            else:
                state.evaluations_without_improvement += 1
                logger.info(
                    "Step %d: %s %.2f (best %.2f at step %d)",
                    state.global_step,
                    selection.label,
                    f1,
                    state.best_f1,
                    state.best_step,
                )
            stop = config.patience is not None and state.evaluations_without_improvement >= config.patience
        decision = (stop, state.best_f1, state.best_step, state.evaluations_without_improvement)
        decision += (state.eval_seconds, state.evaluations)
        decision = engine.broadcast(decision)
        stop, state.best_f1, state.best_step, state.evaluations_without_improvement = decision[:4]
        state.eval_seconds, state.evaluations = decision[4:]
        return stop

    unit = "doc" if world_size == 1 else "step"
    progress = tqdm(total=plan.total_steps, initial=state.global_step, desc=description, unit=unit, disable=not main)
    running_loss, running_count, started = 0.0, 0, clock()
    for callback in callbacks:
        callback.on_train_start(state)
    model.train()
    stop = False
    try:
        if config.eval_on_start and state.global_step == 0 and state.evaluations == 0:
            stop = evaluate_and_keep_best()  # the starting weights: a candidate for the best
        while state.epoch < config.num_epochs and not stop:
            order = shard(epoch_order(len(documents), config.seed, state.epoch), rank, world_size)
            while state.position < len(order):
                step_started = clock()
                document = documents[order[state.position]]
                if prepare is not None:
                    document = prepare(document, crop_generator)
                loss = training_step(losses, document, optimisers, config.gradient_clip, engine, clip_each_loss)
                state.train_seconds += clock() - step_started
                state.position += 1
                state.global_step += 1
                running_loss += loss
                running_count += 1
                progress.update(1)
                if state.global_step % config.report_frequency == 0:
                    seconds = max(clock() - started, 1e-9)
                    statistics = report() if report is not None else {}
                    progress.set_postfix(
                        loss=f"{running_loss / running_count:.2f}",
                        **{name: f"{value:.2f}" for name, value in statistics.items()},
                        docs_s=f"{running_count * world_size / seconds:.2f}",
                    )
                    for callback in callbacks:
                        callback.on_report(state, statistics)
                    running_loss, running_count, started = 0.0, 0, clock()
                if config.time_budget_minutes is not None:
                    # rank 0's clock plans for every rank
                    planned = engine.broadcast(budget_plan(state, config, at_most))
                    if planned != plan.total_steps:
                        plan.total_steps = state.planned_steps = planned
                        optimisers.follow_plan()
                    if progress.total != plan.total_steps:
                        progress.total = plan.total_steps
                        progress.refresh()
                # max_steps also stops a run whose schedule is longer (one continuing the original's)
                reached_max = state.global_step >= plan.total_steps or state.global_step >= (
                    config.max_steps or plan.total_steps
                )
                if reached_max and config.time_budget_minutes is not None and plan.total_steps < at_most:
                    logger.info(
                        "Time budget of %.1f minutes: the schedule ends at step %d",
                        config.time_budget_minutes,
                        state.global_step,
                    )
                # A budgeted run evaluates after its first step too: the plan needs an evaluation's cost.
                untimed = config.time_budget_minutes is not None and state.evaluations == 0
                if state.global_step % config.eval_frequency == 0 or reached_max or untimed:
                    stop = evaluate_and_keep_best()
                if state.global_step % config.checkpoint_frequency == 0:
                    write_checkpoint()
                for callback in callbacks:
                    callback.on_step_end(state, loss, optimisers.learning_rates())
                if stop or reached_max:
                    stop = True
                    break
            if state.position >= len(order):
                state.epoch += 1
                state.position = 0
        if state.best_step != state.global_step and not stop:
            evaluate_and_keep_best()
        state.finished = True
        write_checkpoint()
    finally:
        progress.close()
        for callback in callbacks:
            callback.on_train_end(state)
    return state


@dataclass
class Recipe:
    """How one model trains: its losses for a document, its optimisers, its crop, and what it starts from."""

    losses: LossFunction  # the model's losses for one document, backpropagated in turn
    optimisers: Callable[[int | StepPlan], Optimisers]  # given the total steps, or the plan of a budgeted run
    prepare: Prepare | None  # what each training item becomes before its step (``cropping``); None: as it is
    start: str = ""  # what else makes a run the same run (e.g. a hash of the weights it starts from)
    # Clip every parameter's gradients, accumulated so far, after each loss's backward (Xia et al.'s 2020 trainer,
    # ``clip_every_segment``), besides the clip before the step.
    clip_each_loss: bool = False
    # Puts an optimiser state to continue in the optimisers and gives the run's first state (an imported model's
    # original optimiser state); None: fresh optimisers at step 0.
    continue_from: Callable[[Optimisers], TrainState] | None = None


@dataclass
class Run:
    """Where a run keeps its state, how dev is scored, and who watches it."""

    work_dir: Path  # checkpoints, the best model so far, curves; a killed run resumes from here
    remove_singletons: bool  # dev is scored as the ``evaluate`` pipeline scores, with its setting
    restart: bool = False  # discard a run kept in ``work_dir``
    # The gold dev CoNLL file's key (``evaluation.predictions.gold_key``), the one ``evaluate`` scores
    # against; None scores against the dev documents' own (minimize.py-merged) clusters.
    dev_key: GoldKey | None = None
    callbacks: Sequence[TrainingCallback] = ()
    log_params: dict[str, Any] | None = None  # with these, DVCLive curves under ``work_dir/dvclive``
    clock: Callable[[], float] = time.perf_counter  # seconds, for the time budget (tests simulate one)

    # The parameter that names ``work_dir`` (e.g. ``coref_train.work_dir``): what a refused second run may change.
    work_dir_parameter: str = "work_dir"
    # What the progress bar says it trains (e.g. "train baseline cpu_minilm on litbank").
    description: str = "train"

    def __post_init__(self) -> None:
        self.work_dir = Path(self.work_dir)
        if not isinstance(self.remove_singletons, bool):
            raise ConfigError(f"evaluate key 'remove_singletons': {self.remove_singletons!r} is not true or false")

    @contextlib.contextmanager
    def holding_work_dir(self) -> Iterator[None]:
        """This run holds ``work_dir`` for the block: another live run there is refused at once, in one line.

        Rank 0 holds it (under torchrun or SLURM the other ranks do not try); blocks nest, so
        an entry point may hold it before loading its model and ``fit`` again around training.
        """
        if launched_rank() != 0:
            yield
            return
        way_out = f"give this run a work directory of its own (--params {self.work_dir_parameter}=PATH)"
        with exclusive_directory(self.work_dir, way_out):
            yield


def fit(
    trained: CorefModel,
    recipe: Recipe,
    train_documents: Sequence[dict[str, Any]],
    dev_documents: Sequence[dict[str, Any]],
    training: TrainingConfig,
    run: Run,
) -> CorefModel:
    """A whole run: train with resume from ``run.work_dir``, select on dev, return the best-on-dev model.

    The run takes the engine's devices, processes and precision (``training.device``,
    ``devices``, ``num_nodes``, ``strategy``, ``precision``). With several devices on
    this machine the engine spawns one worker per device and this process waits;
    started by torchrun or SLURM, this process is one of the ranks. Rank 0 writes.
    """
    # precision auto is decided once, here, for the run's device: the fingerprint and every rank see the choice
    training = replace(training, precision=resolve_precision(training.precision, resolve_device(training.device)))
    engine = Engine(training)
    fingerprint = run_fingerprint(
        {"model_type": trained.model_type, **trained.config.to_dict(), "start": recipe.start},
        {**training.to_dict(), "remove_singletons": run.remove_singletons, "dev_key": _key_digest(run.dev_key)},
        train_documents,
        dev_documents,
    )
    job = _RankJob(trained, recipe, train_documents, dev_documents, training, run, fingerprint)
    with run.holding_work_dir():
        summary = engine.launch(_train_on_rank, job)
    logger.info(
        "Best dev CoNLL F1 %.2f at step %d of %d", summary["best_f1"], summary["best_step"], summary["global_step"]
    )
    if launched_rank() == 0:  # this process (the parent of spawned workers), or rank 0 of torchrun or SLURM
        record = training_record(trained, recipe, training, run, summary, engine, fingerprint)
        record.update(train_documents=len(train_documents), dev_documents=len(dev_documents))
        write_training_record(record, run.work_dir / "best")
    return CorefModel.load(run.work_dir / "best", device=engine.device)


def training_record(
    trained: CorefModel,
    recipe: Recipe,
    training: TrainingConfig,
    run: Run,
    summary: dict[str, Any],
    engine: Engine,
    fingerprint: str,
) -> dict[str, Any]:
    """How the best model of a finished run was trained, for its directory's ``training.json`` (model cards)."""
    from coref_pipeline import __version__

    named = run.log_params or {}
    return {
        "model_type": trained.model_type,
        "preset": named.get("preset"),
        "overrides": named.get("overrides", {}),
        "encoder": trained.config.encoder,
        "started_from": recipe.start or None,
        "steps": summary["global_step"],
        "best_step": summary["best_step"],
        "best_dev_conll_f1": summary["best_f1"],
        **training_time(summary["train_seconds"]),
        "precision": training.precision,
        "device": engine.device.type,
        "devices": engine.world_size,
        "seed": training.seed,
        "coref_pipeline": __version__,
        "torch": torch.__version__,
        "run_fingerprint": fingerprint,
    }


def _key_digest(key: GoldKey | None) -> list | None:
    """The dev key as plain lists (for the run's fingerprint: another key selects another best model)."""
    if key is None:
        return None
    return [
        [doc_key, [[list(span) for span in cluster] for cluster in key.clusters[doc_key]]]
        for doc_key in sorted(key.clusters)
    ]


class _RankJob:
    """What every rank of ``fit`` trains: one opaque object, handed to spawned workers whole."""

    def __init__(self, *parts: Any) -> None:
        self.parts = parts


def _train_on_rank(engine: Engine, job: _RankJob) -> dict[str, Any]:
    """One rank's part of ``fit``: set up, train, and the final state (rank 0's is returned by the launch)."""
    if engine.spawns:
        # A spawned worker's tensors arrive in memory shared with the other workers: take a copy of its own.
        job = copy.deepcopy(job)
    trained, recipe, train_documents, dev_documents, training, run, fingerprint = job.parts
    if engine.is_main:
        prepare_work_dir(run.work_dir, fingerprint, run.restart, training.checkpoint_frequency)
    engine.barrier()
    configure_encoder_for_training(trained.model.encoder, training)
    trained.to(engine.device)
    engine.setup(trained.model)
    train_tensors = [trained.tensorize(document) for document in train_documents]
    dev_subset = dev_documents[: training.eval_max_documents] if training.eval_max_documents else dev_documents
    plan = StepPlan(steps_at_most(training, len(train_tensors), engine.world_size), training.warmup_ratio)
    best_dir = run.work_dir / "best"

    dev_key = run.dev_key.restricted_to(d["doc_key"] for d in dev_subset) if run.dev_key is not None else None

    def evaluate() -> dict[str, float]:
        predictions = trained.predict_documents(dev_subset, progress=False)
        return summary_metrics(score_predictions(predictions, run.remove_singletons, key=dev_key))

    callbacks = list(run.callbacks)
    if run.log_params is not None:
        callbacks.append(DvcLiveCallback(run.work_dir / "dvclive", run.log_params))
    state = train_loop(
        trained.model,
        train_tensors,
        recipe.losses,
        recipe.optimisers(plan),
        evaluate,
        lambda: trained.save(best_dir),
        training,
        run.work_dir,
        recipe.prepare,
        callbacks,
        engine,
        plan,
        run.clock,
        description=run.description,
        clip_each_loss=recipe.clip_each_loss,
        start=recipe.continue_from,
    )
    engine.barrier()
    return asdict(state)


def decide_for_corpus(config: ConfigT, corpus: SegmentedCorpus) -> ConfigT:
    """``config`` with the settings its training corpus decides (``mention_loss_coef: auto``), the choice logged."""
    if config.mention_loss_coef != AUTO:
        return config
    share = singleton_share(corpus.documents("train", config.segment_length))
    annotated = share >= SINGLETON_CORPUS_SHARE
    decided = resolve_mention_loss(config, annotated)
    logger.info(
        "mention_loss_coef auto: %s (%.0f%% of the training documents' clusters have one mention: %s)",
        decided.mention_loss_coef,
        100 * share,
        "the corpus annotates singletons" if annotated else "no singletons annotated",
    )
    return decided


def decide_for_run(config: ConfigT, training: TrainingConfig) -> tuple[ConfigT, TrainingConfig]:
    """``config`` and ``training`` with the settings the run's device decides: ``precision: auto`` (logged once,
    here) and ``ffnn_size`` / ``max_top_antecedents`` ``auto`` (the head for fp32 on a CPU, or the full head;
    the choice logged)."""
    device = resolve_device(training.device)
    training = replace(training, precision=resolve_precision(training.precision, device))
    if all(getattr(config, key, None) != AUTO for key in FULL_HEAD):
        return config, training
    fp32_cpu = device.type == "cpu" and training.precision == "32"
    decided = resolve_head(config, fp32_cpu)
    logger.info(
        "head auto: ffnn_size %s, max_top_antecedents %s (%s)",
        decided.ffnn_size,
        getattr(decided, "max_top_antecedents", None),
        "fp32 on a CPU: the smaller head, more steps in a time budget"
        if fp32_cpu
        else f"{training.precision} on a {device.type}: the full head",
    )
    return decided, training


def fit_on_corpus(
    trained: CorefModel, recipe: Recipe, corpus: SegmentedCorpus, training: TrainingConfig, run: Run
) -> CorefModel:
    """``fit`` on a segmented corpus's train and dev, once the corpus is known to be segmented for the model."""
    config = trained.config
    train_documents = trained.corpus_documents(corpus, "train")
    dev_documents = trained.corpus_documents(corpus, "dev")
    logger.info(
        "Training the %s model (%s) on %d documents; dev %d",
        trained.model_type,
        config.encoder,
        len(train_documents),
        len(dev_documents),
    )
    params = {**config.to_dict(), **training.to_dict(), **(run.log_params or {})}
    return fit(trained, recipe, train_documents, dev_documents, training, replace(run, log_params=params))
