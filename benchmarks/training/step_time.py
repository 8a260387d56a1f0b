"""Seconds per training step of head settings beside the default recipe's, in alternating rounds.

Run: python benchmarks/training/step_time.py [--precision 32] [--rounds 4] [--round-steps 15]
     [--setting "25 antecedents: max_top_antecedents=25" ...]

Each setting is the ``cpu_minilm`` preset with its ``key=value`` overrides (the first, ``defaults``, has
none: at ``--precision 32`` the head fp32 takes), a model of its own built from the packaged MiniLM. The
settings take turns: in each of ``--rounds`` rounds every setting trains ``--round-steps`` steps on the
same LitBank training documents with the same crops, so that a slower spell of the host falls on all of
them; the first round warms up and is left out.
The cost of a step depends on the sizes, not on the trained values. It prints each setting's seconds per
step and its steps per minute relative to the defaults (the ratio measured side by side), and writes
``data/benchmarks/step_time.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import json
import logging
import statistics
import time

import torch

from benchmarks.common import LITBANK, ROOT, cpu_minilm_settings, parse_overrides, segmented_litbank, trainable_baseline
from coref_pipeline.models.document import random_crop
from coref_pipeline.runtime.devices import resolve_precision
from coref_pipeline.training.loop import training_step

OUT = ROOT / "data" / "benchmarks" / "step_time.json"
# What may buy steps at little cost a step beside the head fp32 takes (docs/benchmarks.md, "The head on an fp32
# CPU"): the full head for reference, then the coarse-to-fine pruning ratio, a narrower FFNN (the mention
# scorer's too), fewer antecedents.
SETTINGS = [
    "full head: ffnn_size=1000 max_top_antecedents=50",
    "top_span_ratio 0.3: top_span_ratio=0.3",
    "ffnn 250: ffnn_size=250",
    "15 antecedents: max_top_antecedents=15",
]


def parse_setting(text: str) -> tuple[str, dict[str, object]]:
    name, _, pairs = text.partition(":")
    return name.strip(), parse_overrides(pairs.split())


class Trainee:
    """One setting's model and optimisers, stepped on demand."""

    def __init__(self, overrides: dict[str, object], corpus, precision: str) -> None:
        model_config, training = cpu_minilm_settings({**overrides, "precision": precision})
        self.built, self.optimisers, self.engine, self.training = trainable_baseline(corpus, model_config, training)
        self.config = self.built.config

    def steps(self, documents: list[dict], seed: int) -> float:
        """Seconds for one step on each of ``documents`` (crops drawn from ``seed``)."""
        tensors = [self.built.tensorize(document) for document in documents]
        generator = torch.Generator().manual_seed(seed)
        started = time.perf_counter()
        for document in tensors:
            crop = random_crop(document, self.config.max_training_sentences, generator)
            training_step(
                self.built.model.training_losses, crop, self.optimisers, self.training.gradient_clip, self.engine
            )
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--precision", default="32", choices=["auto", "32", "bf16-mixed"])
    parser.add_argument("--rounds", type=int, default=4, help="rounds, the first a warm-up")
    parser.add_argument("--round-steps", type=int, default=15)
    parser.add_argument(
        "--setting", action="append", metavar="'NAME: KEY=VALUE ...'", help="a setting beside the defaults"
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if not (LITBANK / "train.conll").is_file():
        raise SystemExit(f"shared LitBank corpus not found at {LITBANK}")
    settings = [("defaults", {})] + [parse_setting(text) for text in (args.setting or SETTINGS)]
    model_config, _ = cpu_minilm_settings({})
    corpus = segmented_litbank(model_config.tokenizer_name, model_config.max_segment_len)
    documents = corpus.documents("train", model_config.max_segment_len)
    trainees = {name: Trainee(overrides, corpus, args.precision) for name, overrides in settings}
    seconds: dict[str, list[float]] = {name: [] for name in trainees}
    for round_index in range(args.rounds):
        start = (round_index * args.round_steps) % len(documents)
        batch = (documents + documents)[start : start + args.round_steps]
        for name, trainee in trainees.items():
            elapsed = trainee.steps(batch, seed=round_index) / len(batch)
            if round_index:  # the first round warms up
                seconds[name].append(elapsed)
            print(f"round {round_index + 1}: {name}: {elapsed:.3f} s a step", flush=True)
    rounds = range(len(seconds["defaults"]))
    results = {
        "precision": resolve_precision(args.precision, torch.device("cpu")),
        "round_steps": args.round_steps,
        "settings": {},
    }
    for name, overrides in settings:
        # steps per minute against the defaults: the median over rounds of the ratio within each round
        ratio = statistics.median(seconds["defaults"][r] / seconds[name][r] for r in rounds)
        results["settings"][name] = {
            "overrides": overrides,
            "seconds_per_step": statistics.median(seconds[name]),
            "steps_per_minute_vs_defaults": ratio,
        }
        print(f"{name}: {statistics.median(seconds[name]):.3f} s a step, {ratio:.2f}x the defaults' steps a minute")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
