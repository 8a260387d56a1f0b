"""Where the incremental model's time goes, per LitBank document, with and without batch_per_segment.

Run: python benchmarks/training/incremental_time.py [--documents 5] [--baseline-dir DIR] [--preset NAME]
       [--set key=value ...] [--batch-modes true,false] [--precisions 32,bf16-mixed]

The model is the ``--preset``'s (default: the ``incremental_train`` preset the parameter file
names), with ``--set`` model keys over it, initialised from the baseline benchmark's best model (as
benchmarks/training/incremental.py does; speed does not depend on training). For the first ``--documents`` LitBank train
documents, segmented at the baseline's length, with the encoder's outputs computed once
beforehand (a frozen encoder's outputs are cached in training):

- inference: the model's decisions (``forward`` without gradients), seconds per document;
- training: the per-segment losses (forward) and their backward passes, timed apart.

Each figure is the median of the documents, for each ``batch_per_segment`` mode and each
precision (``bf16-mixed``: the training loop's autocast, fp32 weights), in one process (so the
ratios are measured within one run). Prints a table; writes
``data/benchmarks/incremental_speed.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import json
import statistics
import time
from contextlib import AbstractContextManager, nullcontext

import torch

from benchmarks.common import ROOT, incremental_preset, parse_overrides, parse_value, segmented_litbank  # noqa: E402
from coref_pipeline.models.config import IncrementalConfig
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.training import build_incremental, incremental_settings, seed_everything
from coref_pipeline.training.loop import decide_for_corpus

BASELINE = ROOT / "data" / "benchmarks" / "baseline_litbank" / "run" / "best"
OUTPUT = ROOT / "data" / "benchmarks" / "incremental_speed.json"


def autocast(precision: str) -> AbstractContextManager:
    """The training loop's autocast for ``precision`` on the CPU (nothing at 32)."""
    dtypes = {"32": None, "bf16-mixed": torch.bfloat16}
    if precision not in dtypes:
        raise SystemExit(f"precision {precision!r}: this benchmark times {list(dtypes)} on the CPU")
    return nullcontext() if dtypes[precision] is None else torch.autocast("cpu", dtype=dtypes[precision])


def time_document(model, tensors, hidden: dict[int, torch.Tensor], precision: str = "32") -> dict[str, float]:
    """Inference seconds, training forward seconds and backward seconds for one document.

    As in training, each loss is computed under ``precision``'s autocast and backpropagated outside it.
    """
    segment_hidden = hidden.__getitem__
    model.eval()
    started = time.perf_counter()
    with torch.no_grad(), autocast(precision):
        model(tensors, segment_hidden)
    inference = time.perf_counter() - started
    model.train()
    forward = backward = 0.0
    losses = model.training_losses(tensors, segment_hidden)
    while True:
        started = time.perf_counter()
        try:
            with autocast(precision):
                loss = next(losses)
        except StopIteration:
            forward += time.perf_counter() - started
            break
        forward += time.perf_counter() - started
        started = time.perf_counter()
        loss.backward()
        backward += time.perf_counter() - started
    model.zero_grad(set_to_none=True)
    return {"inference_s": inference, "train_forward_s": forward, "train_backward_s": backward}


def step_seconds(figures: dict[str, float]) -> float:
    return figures["train_forward_s"] + figures["train_backward_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=5)
    parser.add_argument("--baseline-dir", type=Path, default=BASELINE)
    parser.add_argument("--preset", help="the incremental_train preset (default: the one the parameter file names)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="incremental model key")
    parser.add_argument("--batch-modes", default="true,false", help="batch_per_segment values to time")
    parser.add_argument("--precisions", default="32", help="comma-separated: 32, bf16-mixed")
    args = parser.parse_args()
    if not (args.baseline_dir / "coref_config.json").is_file():
        sys.exit(f"no baseline model at {args.baseline_dir}: run benchmarks/training/baseline.py first")
    torch.set_grad_enabled(True)
    baseline = CorefModel.load(args.baseline_dir)
    preset_name, preset = incremental_preset(args.preset)
    values = {**{k: v for k, v in preset.items() if k in IncrementalConfig.keys()}, **parse_overrides(args.set)}
    config, _ = incremental_settings(baseline, values)
    corpus = segmented_litbank(config.tokenizer_name, config.max_segment_len)
    values["mention_loss_coef"] = decide_for_corpus(config, corpus).mention_loss_coef  # auto: as a run decides it
    documents = corpus.documents("train", config.segment_length)[: args.documents]
    results: dict[str, dict[str, float]] = {}
    per_document: dict[str, list[dict[str, float]]] = {}
    encoded: list[tuple] = []
    modes = [parse_value(mode) for mode in args.batch_modes.split(",")]
    precisions = args.precisions.split(",")
    for batch, precision in ((batch, precision) for batch in modes for precision in precisions):
        seed_everything(13)
        batch_config, _ = incremental_settings(baseline, {**values, "batch_per_segment": batch})
        trained = build_incremental(baseline, batch_config)
        model = trained.model
        if not encoded:  # the frozen encoder's outputs, once (as the training cache holds them)
            for document in documents:
                tensors = trained.tensorize(document)
                with torch.no_grad():
                    hidden = {i: model.encode_segment(tensors, i) for i in range(tensors.input_ids.shape[0])}
                encoded.append((tensors, hidden))
        time_document(model, *encoded[0], precision)  # warm-up
        rows = [time_document(model, tensors, hidden, precision) for tensors, hidden in encoded]
        name = ("batched" if batch else "one span at a time") + ("" if precision == "32" else f", {precision}")
        per_document[name] = rows
        results[name] = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
    subtokens = [tensors.num_tokens for tensors, _ in encoded]
    print(
        f"{len(documents)} LitBank train documents, {min(subtokens)}-{max(subtokens)} subtokens; "
        f"the {preset_name!r} preset with {parse_overrides(args.set) or 'no --set'}; median seconds per document"
    )
    print(f"{'batch_per_segment':<32} {'inference':>10} {'train forward':>14} {'train backward':>15}")
    for name, figures in results.items():
        print(
            f"{name:<32} {figures['inference_s']:>10.2f} {figures['train_forward_s']:>14.2f} "
            f"{figures['train_backward_s']:>15.2f}"
        )
    reference = next(iter(results))
    for name, figures in list(results.items())[1:]:  # > 1: slower than the first row
        print(
            f"{name}, time / {reference}'s: "
            f"inference {figures['inference_s'] / results[reference]['inference_s']:.2f}x, "
            f"training step {step_seconds(figures) / step_seconds(results[reference]):.2f}x"
        )
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    record = {"preset": preset_name, "model": values, "median": results, "documents": per_document}
    OUTPUT.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
