"""The incremental model against its baseline on the shared LitBank split (MiniLM).

Run: python benchmarks/training/incremental.py [--minutes 45] [--baseline-dir DIR] [--set key=value ...]
     python benchmarks/training/incremental.py --init-only   (dev F1 of each score form right after initialisation)
     python benchmarks/training/incremental.py --score-only DIR   (a trained incremental model against its baseline on
                                                          test, in a fresh process: F1 and inference time)
     python benchmarks/training/incremental.py --throughput N [--processes P] [--set key=value ...]   (training
                                                          documents/s of both models on the same N train
                                                          documents, alternating, in P processes)

1. Segments LitBank fold 0 (../shared/corpora/litbank) at the baseline's segment length.
2. Initialises the incremental model from the baseline benchmark's best model
   (``data/benchmarks/baseline_litbank/run/best``, written by benchmarks/training/baseline.py)
   and trains it with the ``incremental_train`` parameters (plus ``--set``
   overrides of model or training keys) within a training-time budget of
   ``--minutes``, evaluating on dev and keeping the best (singletons removed from
   the gold, as the baseline benchmark).
3. Scores both models on test and prints their CoNLL F1 side by side, with
   inference seconds per document.

Figures go to stdout and to ``data/benchmarks/incremental_litbank/results.json``.

The inference times of step 3 are measured in the process that trained, whose state slows
both models (the incremental one more: it allocates many small tensors). ``--score-only`` times
both on test in a fresh process, document by document in turn, for ``--rounds`` rounds: the ratio
to quote. ``--throughput N`` times both models' training steps on the same N train documents, in
turn, each by its own recipe, in ``--processes`` training processes (``devices``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import json
import logging
import resource
import time
from dataclasses import replace

import torch

from benchmarks.common import LITBANK, ROOT, incremental_preset, parse_overrides, segmented_litbank  # noqa: E402
from coref_pipeline.evaluation.predictions import score_predictions, summary_metrics
from coref_pipeline.models.config import INCREMENTAL_SCORES, IncrementalConfig, TrainingConfig
from coref_pipeline.models.document import random_crop
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.training import (
    Run,
    baseline_recipe,
    build_incremental,
    incremental_recipe,
    incremental_settings,
    train_incremental,
)
from coref_pipeline.training.engine import Engine, rank_seed, shard
from coref_pipeline.training.loop import configure_encoder_for_training, decide_for_corpus, training_step

WORK = ROOT / "data" / "benchmarks" / "incremental_litbank"
BASELINE = ROOT / "data" / "benchmarks" / "baseline_litbank" / "run" / "best"


def timed_test_metrics(model: CorefModel, documents: list[dict]) -> dict[str, float]:
    started = time.perf_counter()
    predictions = model.predict_documents(documents, total=len(documents))
    seconds = time.perf_counter() - started
    scores = summary_metrics(score_predictions(predictions, remove_singletons=True))
    return {**scores, "seconds_per_document": seconds / len(documents)}


def interleaved_test_metrics(models: dict[str, CorefModel], documents: list[dict]) -> dict[str, dict[str, float]]:
    """Each model on each document in turn, the order alternating by document, so that a slower spell of
    the machine falls on every model alike: each model's CoNLL F1 and seconds per document."""
    predictions: dict[str, list[dict]] = {name: [] for name in models}
    seconds = dict.fromkeys(models, 0.0)
    names = list(models)
    for number, document in enumerate(documents):
        for name in names if number % 2 == 0 else names[::-1]:
            started = time.perf_counter()
            predictions[name].extend(models[name].predict_documents([document], progress=False))
            seconds[name] += time.perf_counter() - started
    return {
        name: {
            **summary_metrics(score_predictions(predictions[name], remove_singletons=True)),
            "seconds_per_document": seconds[name] / len(documents),
        }
        for name in names
    }


def initial_dev_f1(args: argparse.Namespace, model_values: dict, training_values: dict) -> None:
    """Dev (and test) CoNLL F1 of each score form right after initialisation from the baseline: no training."""
    baseline = CorefModel.load(args.baseline_dir)
    results = {}
    for score in INCREMENTAL_SCORES:
        values = {**model_values, "score": score, **training_values}
        if score != "calibrated":  # the coarse floor is the calibrated score's (the preset's, for that form)
            values.pop("min_coarse_score", None)
        config, _ = incremental_settings(baseline, values)
        corpus = segmented_litbank(config.tokenizer_name, config.max_segment_len)
        config = decide_for_corpus(config, corpus)
        model = build_incremental(CorefModel.load(args.baseline_dir), config)
        results[score] = {
            split: timed_test_metrics(model, corpus.documents(split, config.max_segment_len))
            for split in ("dev", "test")
        }
    args.work_dir.mkdir(parents=True, exist_ok=True)
    (args.work_dir / "initial_results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"{'score':<12} {'dev CoNLL F1':>13} {'test CoNLL F1':>14} {'s/doc':>7}  (right after initialisation)")
    for score, metrics in results.items():
        print(
            f"{score:<12} {metrics['dev']['conll_f1']:>13.2f} {metrics['test']['conll_f1']:>14.2f} "
            f"{metrics['dev']['seconds_per_document']:>7.2f}"
        )


def score_only(args: argparse.Namespace) -> None:
    """Both models on test in this (fresh) process, document by document in turn: CoNLL F1 and inference
    seconds per document, for ``--rounds`` rounds."""
    baseline = CorefModel.load(args.baseline_dir)
    incremental = CorefModel.load(args.score_only)
    if incremental.model_type != "incremental":
        sys.exit(f"{args.score_only} holds a {incremental.model_type} model, not an incremental one")
    config = incremental.model.config
    documents = segmented_litbank(config.tokenizer_name, config.max_segment_len).documents(
        "test", config.max_segment_len
    )
    rounds = [
        interleaved_test_metrics({"baseline": baseline, "incremental": incremental}, documents)
        for _ in range(args.rounds)
    ]
    print(
        f"{'round':<6} {'baseline F1':>12} {'incremental F1':>15} {'baseline s/doc':>15} "
        f"{'incremental s/doc':>18} {'ratio':>6}"
    )
    for number, scores in enumerate(rounds, 1):
        base, incr = scores["baseline"], scores["incremental"]
        print(
            f"{number:<6} {base['conll_f1']:>12.2f} {incr['conll_f1']:>15.2f} {base['seconds_per_document']:>15.2f} "
            f"{incr['seconds_per_document']:>18.2f} {incr['seconds_per_document'] / base['seconds_per_document']:>6.2f}"
        )
    args.work_dir.mkdir(parents=True, exist_ok=True)
    (args.work_dir / "score_only.json").write_text(json.dumps(rounds, indent=2) + "\n")


class ThroughputJob:
    """What every process of a ``--throughput`` launch builds and times: one model's training steps."""

    def __init__(self, name: str, args: argparse.Namespace, model_values: dict, training_values: dict) -> None:
        self.name, self.baseline_dir, self.documents, self.passes = name, args.baseline_dir, args.throughput, 2
        self.model_values, self.training_values = model_values, training_values


def timed_passes_on_rank(engine: Engine, job: ThroughputJob) -> list[float]:
    """On each process: the model by its own recipe, this process's share of the documents (one a step,
    as ``devices`` training shards them), ``job.passes`` timed passes; seconds per pass, as rank 0 measured
    them between barriers (DDP synchronises every step, so every process ends each pass with it)."""
    baseline = CorefModel.load(job.baseline_dir)
    config, training = incremental_settings(baseline, {**job.model_values, **job.training_values})
    corpus = segmented_litbank(config.tokenizer_name, config.max_segment_len)
    config = decide_for_corpus(config, corpus)
    if job.name == "baseline":
        trained, recipe = baseline, baseline_recipe(baseline, training)
        configure_encoder_for_training(baseline.model.encoder, training)
    else:
        trained = build_incremental(CorefModel.load(job.baseline_dir), config)
        recipe = incremental_recipe(trained, training, "start")
    documents = corpus.documents("train", config.max_segment_len)[: job.documents]
    mine = shard(range(len(documents)), engine.rank, engine.world_size)
    tensors = [trained.tensorize(documents[index]) for index in mine]
    engine.setup(trained.model)
    optimisers = recipe.optimisers(10_000)
    generator = torch.Generator().manual_seed(rank_seed(0, engine.rank))
    trained.model.train()
    seconds = []
    for _ in range(job.passes):
        engine.barrier()
        started = time.perf_counter()
        for document in tensors:
            if recipe.max_segments is not None:
                document = random_crop(document, recipe.max_segments, generator)
            training_step(recipe.losses, document, optimisers, training.gradient_clip, engine)
        engine.barrier()
        seconds.append(time.perf_counter() - started)
    return seconds


def training_throughput(args: argparse.Namespace, model_values: dict, training_values: dict) -> None:
    """Training documents/s of both models on the same N train documents, each by its own recipe, in
    ``--processes`` processes (``devices``: one thread each when there are several), alternating.

    Each round launches the baseline (its crop of ``max_training_sentences`` segments, the encoder
    fine-tuned, from its trained weights), then the incremental model (initialised from it, with the
    ``--set`` keys, its frozen encoder's outputs cached); each times two passes over the documents: the
    baseline's second, and the incremental model's first (encoder computed) and second (outputs cached,
    as later epochs read them).
    """
    training = TrainingConfig.from_dict(training_values)
    rounds = []
    for _ in range(args.rounds):
        measured = {}
        for name in ("baseline", "incremental"):
            engine = Engine(replace(training, device="cpu", devices=args.processes))
            job = ThroughputJob(name, args, model_values, training_values)
            measured[name] = [args.throughput / seconds for seconds in engine.launch(timed_passes_on_rank, job)]
        rounds.append(measured)
    print(
        f"{'round':<6} {'baseline docs/s':>16} {'incremental docs/s (encoder computed)':>38} "
        f"{'(outputs cached)':>17} {'ratio (cached)':>15}  ({args.throughput} documents, {args.processes} process(es))"
    )
    for number, rates in enumerate(rounds, 1):
        base, (computed, cached) = rates["baseline"][-1], rates["incremental"]
        print(f"{number:<6} {base:>16.3f} {computed:>38.3f} {cached:>17.3f} {cached / base:>15.2f}")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    results = {"processes": args.processes, "documents": args.throughput, "documents_per_second": rounds}
    (args.work_dir / "throughput.json").write_text(json.dumps(results, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=45.0, help="training-time budget")
    parser.add_argument("--baseline-dir", type=Path, default=BASELINE)
    parser.add_argument("--preset", help="the incremental_train preset (default: the one the parameter file names)")
    parser.add_argument("--seed", type=int, help="the run's seed (default: the preset's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="model or training key")
    parser.add_argument("--work-dir", type=Path, default=WORK)
    parser.add_argument("--init-only", action="store_true", help="only score each score form untrained")
    parser.add_argument("--score-only", type=Path, metavar="DIR", help="only score this trained incremental model")
    parser.add_argument("--rounds", type=int, default=2, help="--score-only, --throughput: timing rounds")
    parser.add_argument("--throughput", type=int, metavar="N", help="only time training steps on N train documents")
    parser.add_argument(
        "--processes", type=int, default=1, help="--throughput: training processes (devices), one thread each if > 1"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not LITBANK.is_dir():
        sys.exit(f"LitBank not found at {LITBANK} (../shared/corpora/litbank)")
    if not (args.baseline_dir / "coref_config.json").is_file():
        sys.exit(f"no baseline model at {args.baseline_dir}: run benchmarks/training/baseline.py first")

    _, preset = incremental_preset(args.preset)
    overrides = {"seed": args.seed, **parse_overrides(args.set)} if args.seed is not None else parse_overrides(args.set)
    model_values = {
        **{k: v for k, v in preset.items() if k in IncrementalConfig.keys()},
        **{k: v for k, v in overrides.items() if k in IncrementalConfig.keys()},
    }
    training_values = {
        **{k: v for k, v in preset.items() if k in TrainingConfig.keys()},
        "eval_frequency": 20,
        "checkpoint_frequency": 10,
        "report_frequency": 5,
        "time_budget_minutes": args.minutes,
        "max_steps": None,  # the budget, not the main job's steps
        **{k: v for k, v in overrides.items() if k in TrainingConfig.keys()},
    }
    unknown = set(overrides) - set(IncrementalConfig.keys()) - set(TrainingConfig.keys())
    if unknown:
        sys.exit(f"unknown keys {sorted(unknown)}")

    if args.init_only:
        initial_dev_f1(args, model_values, training_values)
        return
    if args.score_only:
        if not (args.score_only / "coref_config.json").is_file():
            sys.exit(
                f"no model at {args.score_only}: give the run/best directory of a "
                "benchmarks/training/incremental.py run"
            )
        if args.rounds < 1:
            sys.exit(f"--rounds must be at least 1, got {args.rounds}")
        score_only(args)
        return
    if args.throughput is not None:
        if min(args.throughput, args.rounds, args.processes) < 1:
            sys.exit(
                f"--throughput, --rounds and --processes must be at least 1, got {args.throughput}, {args.rounds} "
                f"and {args.processes}"
            )
        training_throughput(args, model_values, training_values)
        return
    baseline = CorefModel.load(args.baseline_dir)
    config, training = incremental_settings(baseline, {**model_values, **training_values})
    corpus = segmented_litbank(config.tokenizer_name, config.max_segment_len)
    started = time.perf_counter()
    run = Run(args.work_dir / "run", remove_singletons=True)
    best = train_incremental(CorefModel.load(args.baseline_dir), corpus, config, training, run)
    wall_minutes = (time.perf_counter() - started) / 60
    state = json.loads(
        (
            args.work_dir
            / "run"
            / "checkpoints"
            / (args.work_dir / "run" / "checkpoints" / "LATEST").read_text().strip()
            / "state.json"
        ).read_text()
    )["train_state"]

    test_documents = corpus.documents("test", config.max_segment_len)
    incremental_test = timed_test_metrics(best, test_documents)
    baseline_test = timed_test_metrics(baseline, test_documents)
    results = {
        "model": config.to_dict(),
        "training": training.to_dict(),
        "train_minutes": state["train_seconds"] / 60,
        "wall_minutes_with_evaluation": wall_minutes,
        "steps": state["global_step"],
        "documents": state["global_step"] * training.world_size,  # each process reads one a step
        "best_dev_f1": state["best_f1"],
        "best_step": state["best_step"],
        "test": {"incremental": incremental_test, "baseline": baseline_test},
        "difference_f1": incremental_test["conll_f1"] - baseline_test["conll_f1"],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    args.work_dir.mkdir(parents=True, exist_ok=True)
    (args.work_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"{'model':<12} {'test CoNLL F1':>14} {'MUC':>7} {'B3':>7} {'CEAF-e':>7} {'s/doc':>7}")
    for name, metrics in (("baseline", baseline_test), ("incremental", incremental_test)):
        print(
            f"{name:<12} {metrics['conll_f1']:>14.2f} {metrics['muc_f1']:>7.2f} {metrics['bcub_f1']:>7.2f} "
            f"{metrics['ceafe_f1']:>7.2f} {metrics['seconds_per_document']:>7.2f}"
        )
    print(f"difference (incremental - baseline): {results['difference_f1']:+.2f} F1")
    print(
        f"incremental training: {results['train_minutes']:.1f} min ({results['documents']} documents, "
        f"{results['documents'] / state['train_seconds']:.3f} documents/s), "
        f"best dev {state['best_f1']:.2f} at step {state['best_step']}; peak RSS {results['peak_rss_mb']:.0f} MB"
    )


if __name__ == "__main__":
    main()
