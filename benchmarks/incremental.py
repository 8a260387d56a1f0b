"""The incremental model against its baseline on the shared LitBank split (MiniLM).

Run: python benchmarks/incremental.py [--minutes 45] [--baseline-dir DIR] [--set key=value ...]
     python benchmarks/incremental.py --init-only   (dev F1 of each score form right after initialisation)
     python benchmarks/incremental.py --score-only DIR   (a trained incremental model against its baseline on
                                                          test, in a fresh process: F1 and inference time)
     python benchmarks/incremental.py --throughput N [--set key=value ...]   (training documents/s of both
                                                          models on the same N train documents, alternating)

1. Segments LitBank fold 0 (../shared/corpora/litbank) at the baseline's segment length.
2. Initialises the incremental model from the baseline benchmark's best model
   (``data/benchmarks/baseline_litbank/run/best``, written by benchmarks/baseline.py)
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
turn, each by its own recipe.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import yaml

from coref_pipeline.evaluation.predictions import score_predictions, summary_metrics
from coref_pipeline.inference import CorefModel
from coref_pipeline.models.config import INCREMENTAL_SCORES, IncrementalConfig, TrainingConfig
from coref_pipeline.models.document import random_crop
from coref_pipeline.training import (
    Run,
    baseline_recipe,
    build_incremental,
    incremental_recipe,
    incremental_settings,
    train_incremental,
)
from coref_pipeline.training.engine import Engine
from coref_pipeline.training.loop import Recipe, configure_encoder_for_training, training_step

sys.path.insert(0, str(Path(__file__).resolve().parent))
from baseline import LITBANK, ROOT, parse_overrides, segmented_litbank  # noqa: E402

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
        config, _ = incremental_settings(baseline, {**model_values, "score": score}, training_values)
        corpus = segmented_litbank(config.tokenizer_name, config.max_segment_len)
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
        f"{'round':<6} {'baseline F1':>12} {'incremental F1':>15} {'baseline s/doc':>15} {'incremental s/doc':>18} {'ratio':>6}"
    )
    for number, scores in enumerate(rounds, 1):
        base, incr = scores["baseline"], scores["incremental"]
        print(
            f"{number:<6} {base['conll_f1']:>12.2f} {incr['conll_f1']:>15.2f} {base['seconds_per_document']:>15.2f} "
            f"{incr['seconds_per_document']:>18.2f} {incr['seconds_per_document'] / base['seconds_per_document']:>6.2f}"
        )
    args.work_dir.mkdir(parents=True, exist_ok=True)
    (args.work_dir / "score_only.json").write_text(json.dumps(rounds, indent=2) + "\n")


def timed_steps(recipe: Recipe, model: CorefModel, documents: list, training: TrainingConfig, seed: int) -> float:
    """Seconds per document of the recipe's training step (its crop, losses and optimisers) over ``documents``."""
    optimisers = recipe.optimisers(10_000)
    engine = Engine(replace(training, device="cpu"))
    generator = torch.Generator().manual_seed(seed)
    model.model.train()
    started = time.perf_counter()
    for document in documents:
        if recipe.max_segments is not None:
            document = random_crop(document, recipe.max_segments, generator)
        training_step(recipe.losses, document, optimisers, training.gradient_clip, engine)
    return (time.perf_counter() - started) / len(documents)


def training_throughput(args: argparse.Namespace, model_values: dict, training_values: dict) -> None:
    """Training seconds per document of both models on the same train documents, in one process, alternating.

    Each model trains by its own recipe in the training precision: the baseline (its crop of
    ``max_training_sentences`` segments, the encoder fine-tuned) from its trained weights, the
    incremental model (initialised from it, with the ``--set`` keys) with its encoder outputs
    cached, so that its first round computes them and later rounds read them, as epochs do.
    """
    baseline = CorefModel.load(args.baseline_dir)
    config, training = incremental_settings(baseline, model_values, training_values)
    incremental = build_incremental(CorefModel.load(args.baseline_dir), config)
    configure_encoder_for_training(baseline.model.encoder, training)
    documents = segmented_litbank(config.tokenizer_name, config.max_segment_len).documents(
        "train", config.max_segment_len
    )[: args.throughput]
    tensors = {"baseline": [baseline.tensorize(d) for d in documents]}
    tensors["incremental"] = [incremental.tensorize(d) for d in documents]
    recipes = {
        "baseline": (baseline_recipe(baseline, training), baseline),
        "incremental": (incremental_recipe(incremental, training, "start"), incremental),
    }
    rounds = []
    for number in range(args.rounds):
        rounds.append(
            {
                name: timed_steps(recipe, model, tensors[name], training, seed=number)
                for name, (recipe, model) in recipes.items()
            }
        )
    print(f"{'round':<6} {'baseline docs/s':>16} {'incremental docs/s':>19} {'ratio':>6}  ({len(documents)} documents)")
    for number, seconds in enumerate(rounds, 1):
        base, incr = 1 / seconds["baseline"], 1 / seconds["incremental"]
        note = "  (incremental: encoder computed)" if number == 1 else "  (incremental: encoder outputs cached)"
        print(f"{number:<6} {base:>16.3f} {incr:>19.3f} {incr / base:>6.2f}{note}")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    results = {"model": config.to_dict(), "training": training.to_dict(), "seconds_per_document": rounds}
    (args.work_dir / "throughput.json").write_text(json.dumps(results, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=45.0, help="training-time budget")
    parser.add_argument("--baseline-dir", type=Path, default=BASELINE)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="model or training key")
    parser.add_argument("--work-dir", type=Path, default=WORK)
    parser.add_argument("--init-only", action="store_true", help="only score each score form untrained")
    parser.add_argument("--score-only", type=Path, metavar="DIR", help="only score this trained incremental model")
    parser.add_argument("--rounds", type=int, default=2, help="--score-only, --throughput: timing rounds")
    parser.add_argument("--throughput", type=int, metavar="N", help="only time training steps on N train documents")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not LITBANK.is_dir():
        sys.exit(f"LitBank not found at {LITBANK} (../shared/corpora/litbank)")
    if not (args.baseline_dir / "coref_config.json").is_file():
        sys.exit(f"no baseline model at {args.baseline_dir}: run benchmarks/baseline.py first")

    params = yaml.safe_load((ROOT / "conf/base/parameters_incremental_train.yml").read_text())["incremental_train"]
    overrides = parse_overrides(args.set)
    model_values = {**params["model"], **{k: v for k, v in overrides.items() if k in IncrementalConfig.keys()}}
    training_values = {
        **params["training"],
        "eval_frequency": 20,
        "checkpoint_frequency": 10,
        "report_frequency": 5,
        "time_budget_minutes": args.minutes,
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
            sys.exit(f"no model at {args.score_only}: give the run/best directory of a benchmarks/incremental.py run")
        if args.rounds < 1:
            sys.exit(f"--rounds must be at least 1, got {args.rounds}")
        score_only(args)
        return
    if args.throughput is not None:
        if args.throughput < 1 or args.rounds < 1:
            sys.exit(f"--throughput and --rounds must be at least 1, got {args.throughput} and {args.rounds}")
        training_throughput(args, model_values, training_values)
        return
    baseline = CorefModel.load(args.baseline_dir)
    config, training = incremental_settings(baseline, model_values, training_values)
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
        f"incremental training: {results['train_minutes']:.1f} min ({state['global_step']} documents), "
        f"best dev {state['best_f1']:.2f} at step {state['best_step']}; peak RSS {results['peak_rss_mb']:.0f} MB"
    )


if __name__ == "__main__":
    main()
