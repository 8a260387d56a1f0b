"""The incremental model against its baseline on the shared LitBank split (MiniLM).

Run: python benchmarks/incremental.py [--minutes 45] [--baseline-dir DIR] [--set key=value ...]
     python benchmarks/incremental.py --init-only   (dev F1 of each score form right after initialisation)
     python benchmarks/incremental.py --score-only DIR   (a trained incremental model against its baseline on
                                                          test, in a fresh process: F1 and inference time)

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
both on test in a fresh process, alternating them for ``--rounds`` rounds: the ratio to quote.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import sys
import time
from pathlib import Path

import yaml

from coref_pipeline.evaluation.predictions import score_predictions, summary_metrics
from coref_pipeline.inference import CorefModel
from coref_pipeline.models.config import INCREMENTAL_SCORES, IncrementalConfig, TrainingConfig
from coref_pipeline.training import Run, build_incremental, incremental_settings, train_incremental

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
    """Both models on test in this (fresh) process, alternating: CoNLL F1 and inference seconds per document."""
    baseline = CorefModel.load(args.baseline_dir)
    incremental = CorefModel.load(args.score_only)
    if incremental.model_type != "incremental":
        sys.exit(f"{args.score_only} holds a {incremental.model_type} model, not an incremental one")
    config = incremental.model.config
    documents = segmented_litbank(config.tokenizer_name, config.max_segment_len).documents(
        "test", config.max_segment_len
    )
    rounds = []
    for _ in range(args.rounds):
        rounds.append(
            {
                name: timed_test_metrics(model, documents)
                for name, model in (("baseline", baseline), ("incremental", incremental))
            }
        )
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=45.0, help="training-time budget")
    parser.add_argument("--baseline-dir", type=Path, default=BASELINE)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="model or training key")
    parser.add_argument("--work-dir", type=Path, default=WORK)
    parser.add_argument("--init-only", action="store_true", help="only score each score form untrained")
    parser.add_argument("--score-only", type=Path, metavar="DIR", help="only score this trained incremental model")
    parser.add_argument("--rounds", type=int, default=2, help="--score-only: timing rounds")
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
