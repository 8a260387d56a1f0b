"""Where the incremental model's time goes, per LitBank document, with and without batch_per_segment.

Run: python benchmarks/incremental_speed.py [--documents 5] [--baseline-dir DIR] [--set key=value ...]

The model is initialised from the baseline benchmark's best model (as benchmarks/incremental.py
does; speed does not depend on training). For the first ``--documents`` LitBank train
documents, segmented at the baseline's length, with the encoder's outputs computed once
beforehand (a frozen encoder's outputs are cached in training):

- inference: the model's decisions (``forward`` without gradients), seconds per document;
- training: the per-segment losses (forward) and their backward passes, timed apart.

Each figure is the median of the documents, for ``batch_per_segment`` true and false, in
one process (so the ratio is measured within one run). Prints a table; writes
``data/benchmarks/incremental_speed.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from coref_pipeline.inference import CorefModel
from coref_pipeline.training import build_incremental, incremental_settings, seed_everything

sys.path.insert(0, str(Path(__file__).resolve().parent))
from baseline import ROOT, parse_overrides, segmented_litbank  # noqa: E402

BASELINE = ROOT / "data" / "benchmarks" / "baseline_litbank" / "run" / "best"
OUTPUT = ROOT / "data" / "benchmarks" / "incremental_speed.json"


def time_document(model, tensors, hidden: dict[int, torch.Tensor]) -> dict[str, float]:
    """Inference seconds, training forward seconds and backward seconds for one document."""
    segment_hidden = hidden.__getitem__
    model.eval()
    started = time.perf_counter()
    with torch.no_grad():
        model(tensors, segment_hidden)
    inference = time.perf_counter() - started
    model.train()
    forward = backward = 0.0
    losses = model.training_losses(tensors, segment_hidden)
    while True:
        started = time.perf_counter()
        try:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=5)
    parser.add_argument("--baseline-dir", type=Path, default=BASELINE)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="incremental model key")
    args = parser.parse_args()
    if not (args.baseline_dir / "coref_config.json").is_file():
        sys.exit(f"no baseline model at {args.baseline_dir}: run benchmarks/baseline.py first")
    torch.set_grad_enabled(True)
    baseline = CorefModel.load(args.baseline_dir)
    values = parse_overrides(args.set)
    config, _ = incremental_settings(baseline, values, {})
    corpus = segmented_litbank(config.tokenizer_name, config.max_segment_len)
    documents = corpus.documents("train", config.segment_length)[: args.documents]
    results: dict[str, dict[str, float]] = {}
    per_document: dict[str, list[dict[str, float]]] = {}
    encoded: list[tuple] = []
    for batch in (True, False):
        seed_everything(13)
        batch_config, _ = incremental_settings(baseline, {**values, "batch_per_segment": batch}, {})
        trained = build_incremental(baseline, batch_config)
        model = trained.model
        if not encoded:  # the frozen encoder's outputs, once (as the training cache holds them)
            for document in documents:
                tensors = trained.tensorize(document)
                with torch.no_grad():
                    hidden = {i: model.encode_segment(tensors, i) for i in range(tensors.input_ids.shape[0])}
                encoded.append((tensors, hidden))
        time_document(model, *encoded[0])  # warm-up
        rows = [time_document(model, tensors, hidden) for tensors, hidden in encoded]
        name = "batched" if batch else "one span at a time"
        per_document[name] = rows
        results[name] = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
    subtokens = [tensors.num_tokens for tensors, _ in encoded]
    print(
        f"{len(documents)} LitBank train documents, {min(subtokens)}-{max(subtokens)} subtokens; "
        f"model keys: {values or 'defaults'}; median seconds per document"
    )
    print(f"{'batch_per_segment':<20} {'inference':>10} {'train forward':>14} {'train backward':>15}")
    for name, figures in results.items():
        print(
            f"{name:<20} {figures['inference_s']:>10.2f} {figures['train_forward_s']:>14.2f} "
            f"{figures['train_backward_s']:>15.2f}"
        )
    batched, single = results["batched"], results["one span at a time"]
    print(
        f"speed-up of batching: inference {single['inference_s'] / batched['inference_s']:.2f}x, training step "
        f"{(single['train_forward_s'] + single['train_backward_s']) / (batched['train_forward_s'] + batched['train_backward_s']):.2f}x"
    )
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(json.dumps({"model": values, "median": results, "documents": per_document}, indent=2) + "\n")


if __name__ == "__main__":
    main()
