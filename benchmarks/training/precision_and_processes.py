"""Precision and processes on this machine: fp32 vs bf16-mixed, one process vs two (gloo).

Run: python benchmarks/training/precision_and_processes.py [--minutes 8] [--epochs 2] [--steps 20]
     [--part precision|processes|all]

1. Precision: the ``cpu_minilm`` preset on the shared LitBank fold 0 (train; dev for the
   score), once at ``precision: 32`` and once at ``bf16-mixed``, each for a training-time
   budget of ``--minutes`` (same seed, same schedule of ``--epochs`` epochs), then scored
   on dev once (singletons removed, as in the other LitBank benchmarks). Prints training
   documents/s and dev CoNLL F1 side by side.
2. Processes: ``--steps`` steps of the same preset with ``devices: 1`` (one process, two
   threads) and ``devices: 2`` (two CPU processes of one thread each, DDP over gloo,
   started by Lightning Fabric). Prints documents/s for each and their ratio.

Each run goes through ``train_baseline``: the library entry point ``kedro run`` calls.
Figures go to stdout and to ``data/benchmarks/accelerators/results.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import json
import logging
import time

from benchmarks.common import (
    LITBANK,
    ROOT,
    cpu_minilm_settings,
    segmented_litbank,
)
from coref_pipeline.formats.corpus import SegmentedCorpus
from coref_pipeline.models.config import FULL_HEAD
from coref_pipeline.training import Run, train_baseline

WORK = ROOT / "data" / "benchmarks" / "accelerators"


def final_state(work_dir: Path) -> dict:
    checkpoint = sorted((work_dir / "checkpoints").glob("step-*"))[-1]
    return json.loads((checkpoint / "state.json").read_text())["train_state"]


def train(corpus: SegmentedCorpus, name: str, overrides: dict) -> dict:
    # the full head in every row, so that the rows differ by what they name only (ffnn_size / max_top_antecedents
    # auto would take the smaller head in fp32)
    model_config, training = cpu_minilm_settings({**FULL_HEAD, **overrides})
    work_dir = WORK / name
    started = time.perf_counter()
    train_baseline(corpus, model_config, training, Run(work_dir, remove_singletons=True, restart=True))
    state = final_state(work_dir)
    documents = state["global_step"] * training.world_size
    return {
        "precision": training.precision,
        "processes": training.world_size,
        "steps": state["global_step"],
        "documents": documents,
        "training_minutes": state["train_seconds"] / 60,
        "documents_per_second": documents / state["train_seconds"],
        "dev_conll_f1": state["best_f1"],
        "wall_minutes": (time.perf_counter() - started) / 60,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=8.0, help="training budget of each precision run")
    parser.add_argument("--epochs", type=int, default=2, help="the schedule of the precision runs")
    parser.add_argument("--steps", type=int, default=20, help="steps of each process-count run")
    parser.add_argument("--part", choices=("precision", "processes", "all"), default="all")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not (LITBANK / "train.conll").is_file():
        sys.exit(f"shared LitBank corpus not found at {LITBANK}")
    WORK.mkdir(parents=True, exist_ok=True)
    corpus = segmented_litbank("embedded:minilm", 384)
    results_file = WORK / "results.json"
    results = json.loads(results_file.read_text()) if results_file.is_file() else {}

    if args.part in ("precision", "all"):
        common = {
            "device": "cpu",
            "num_epochs": args.epochs,
            "time_budget_minutes": args.minutes,
            "eval_frequency": 100_000,  # one evaluation, at the end of the budget
            "checkpoint_frequency": 100_000,
        }
        results["precision"] = [
            train(corpus, f"precision-{precision}", {**common, "precision": precision})
            for precision in ("32", "bf16-mixed")
        ]
        fp32, bf16 = results["precision"]
        print(f"precision, {args.minutes:g} min of training each on LitBank train, dev scored once:")
        for row in results["precision"]:
            print(
                f"  {row['precision']:>10}: {row['documents_per_second']:.3f} documents/s "
                f"({row['steps']} steps), dev CoNLL F1 {row['dev_conll_f1']:.2f}"
            )
        print(f"  bf16-mixed / 32 documents/s: {bf16['documents_per_second'] / fp32['documents_per_second']:.2f}x")

    if args.part in ("processes", "all"):
        common = {
            "device": "cpu",
            "max_steps": args.steps,
            "eval_frequency": 100_000,
            "eval_max_documents": 1,  # the run's closing evaluation, kept short: speed is measured here
            "checkpoint_frequency": 100_000,
        }
        results["processes"] = [
            train(corpus, f"processes-{devices}", {**common, "devices": devices}) for devices in (1, 2)
        ]
        one, two = results["processes"]
        print(f"processes, {args.steps} steps each (2 processes: 2 documents a step):")
        for row in results["processes"]:
            print(f"  {row['processes']} process(es): {row['documents_per_second']:.3f} documents/s")
        print(f"  2 / 1 documents/s: {two['documents_per_second'] / one['documents_per_second']:.2f}x")

    results_file.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
