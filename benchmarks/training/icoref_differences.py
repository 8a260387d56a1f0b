"""The effect on LitBank dev of each behaviour of Xia et al.'s 2020 code that differs from this project's reading.

Run: python benchmarks/training/icoref_differences.py [--baseline-dir data/06_models/baseline] [--steps 20]
                                                     [--only inference|training]

The ``paper`` preset holds the 2020 code's behaviours (``distance_between: midpoints``, ``evict_from: start``,
``crossing_spans``, ``read_last_sentence: false``, ``gold_entities: latest_mention``, ``clip_every_segment``, Adam's
epsilon 1e-8, no eviction in training; docs/models/incremental.md, "Differences from the authors' code"). The dev
CoNLL F1 (LitBank fold 0, singletons removed, fp32) of each, against this project's reading:

1. inference: the ``paper`` preset initialised from the baseline (``--baseline-dir``, the main job's by default),
   untrained, with each behaviour that changes decisions switched to this project's reading alone; and the
   ``recommended`` preset (the main job's) initialised alike, with each switched to the code's alone;
2. training: ``--steps`` steps of the ``recommended`` preset (the main job's: a ``paper`` step on a whole LitBank
   document takes about a minute on a 2-core CPU) from that baseline, with each behaviour that changes only
   training switched to the code's alone, scored on dev once at the end (no start kept).

Figures go to stdout and to ``data/benchmarks/icoref_differences/results.json``, with the host.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import logging
import tempfile
import time

from benchmarks.common import LITBANK, RESULTS, ROOT, host, incremental_preset, segmented_litbank, write_results
from coref_pipeline.evaluation.predictions import score_predictions, summary_metrics
from coref_pipeline.models.config import IncrementalConfig, TrainingConfig
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.training import Run, build_incremental, incremental_settings, train_incremental
from coref_pipeline.training.loop import decide_for_corpus

BASELINE = ROOT / "data" / "06_models" / "baseline"
# Each behaviour of the code and this project's reading of it: (key, this project's value).
INFERENCE = [
    ("distance_between", "starts"),
    ("evict_from", "midpoint"),
    ("crossing_spans", False),
    ("read_last_sentence", True),
]
# Each behaviour of the code that changes only training: (key, the code's value), set on ``recommended``.
TRAINING = [
    ("gold_entities", "latest_mention"),
    ("clip_every_segment", True),
    ("adam_eps", 1e-8),
    ("evict_in_training", False),
]


def dev_f1(model: CorefModel, documents: list[dict]) -> float:
    predictions = model.predict_documents(documents, total=len(documents))
    return summary_metrics(score_predictions(predictions, remove_singletons=True))["conll_f1"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline-dir", type=Path, default=BASELINE)
    parser.add_argument("--steps", type=int, default=20, help="training steps of each training variant")
    parser.add_argument("--only", choices=["inference", "training"])
    parser.add_argument("--out", type=Path, default=RESULTS / "icoref_differences" / "results.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if not LITBANK.is_dir():
        sys.exit(f"LitBank not found at {LITBANK} (../shared/corpora/litbank)")
    if not (args.baseline_dir / "coref_config.json").is_file():
        sys.exit(f"no baseline model at {args.baseline_dir}: run the main job first (README)")
    _, paper = incremental_preset("paper")
    _, recommended = incremental_preset("recommended")
    baseline = CorefModel.load(args.baseline_dir)
    config, _ = incremental_settings(baseline, paper)
    corpus = segmented_litbank(config.tokenizer_name, config.max_segment_len)
    dev = corpus.documents("dev", config.max_segment_len)
    shown = args.baseline_dir.resolve()
    shown = shown.relative_to(ROOT) if shown.is_relative_to(ROOT) else shown
    results: dict = {"host": host(), "baseline": str(shown), "steps": args.steps}

    def variant(preset: dict, changes: dict) -> tuple[IncrementalConfig, TrainingConfig]:
        values = {**preset, **changes, "precision": "32", "eval_on_start": False}
        config, training = incremental_settings(baseline, values)
        return decide_for_corpus(config, corpus), training

    if args.only in (None, "inference"):
        rows = {}
        for name, changes in [("the code's (paper preset)", {})] + [(k, {k: v}) for k, v in INFERENCE]:
            config, _ = variant(paper, changes)
            started = time.perf_counter()
            rows[name] = dev_f1(build_incremental(CorefModel.load(args.baseline_dir), config), dev)
            print(f"at initialisation, {name:<28} dev {rows[name]:6.2f}  ({time.perf_counter() - started:.0f} s)")
        results["inference"] = rows
        rows = {}
        codes = {"distance_between": "midpoints", "evict_from": "start", "crossing_spans": True}
        codes["read_last_sentence"] = False
        for name, changes in [("this project's (recommended)", {})] + [(k, {k: v}) for k, v in codes.items()]:
            if name == "distance_between":
                continue  # recommended's pair features are the baseline's: the paper's distance is not used
            config, _ = variant(recommended, changes)
            started = time.perf_counter()
            rows[name] = dev_f1(build_incremental(CorefModel.load(args.baseline_dir), config), dev)
            print(
                f"at initialisation, recommended, {name:<28} dev {rows[name]:6.2f}  "
                f"({time.perf_counter() - started:.0f} s)"
            )
        results["inference_recommended"] = rows
    if args.only in (None, "training"):
        rows = {}
        for name, changes in [("this project's (recommended)", {})] + [(k, {k: v}) for k, v in TRAINING]:
            changes = {**changes, "max_steps": args.steps, "eval_frequency": args.steps, "patience": None}
            config, training = variant(recommended, changes)
            started = time.perf_counter()
            with tempfile.TemporaryDirectory() as work:
                run = Run(Path(work), remove_singletons=True)
                trained = train_incremental(CorefModel.load(args.baseline_dir), corpus, config, training, run)
            rows[name] = dev_f1(trained, dev)
            print(
                f"after {args.steps} steps, {name:<28} dev {rows[name]:6.2f}  ({time.perf_counter() - started:.0f} s)"
            )
        results["training"] = rows
    write_results(results, args.out)
    print(f"host: {results['host']}")


if __name__ == "__main__":
    main()
