"""Documents/s of prediction, many documents at once against one at a time, both models, on OntoNotes-shaped text.

Run: python benchmarks/prediction/batched.py [--split test] [--documents N] [--max-tokens 8192]
         [--baseline-dir DIR] [--incremental-dir DIR] [--rounds 2] [--device cpu] [--precision auto]

1. An OntoNotes-shaped split (``benchmarks/common.py``: the CoNLL-2012 English split's document count and a
   log-normal of OntoNotes' mean length, cut at sentence boundaries from the shipped corpora's text), its first
   ``--documents``, segmented as each model reads them (its tokenizer, its segment length).
2. For each model, ``CorefModel.predict_documents`` one document at a time (``max_tokens_in_batch=0``) and
   batched (each ``--max-tokens``: the subtokens of one encoder pass over several documents), in alternating
   rounds (a slower spell of the host falls on both), ``--rounds`` times; documents/s (the median), the
   batched over one at a time, and how many documents' clusters differ between the two ways (those of the last
   round).

Models: the main job's (``data/06_models/baseline``, ``data/06_models/incremental``) unless named. Figures go to
stdout and ``data/benchmarks/batched_prediction.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import statistics
import time

from benchmarks.common import RESULTS, ROOT, host, ontonotes_shaped_documents, write_results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="test", choices=["train", "dev", "test"])
    parser.add_argument("--documents", type=int, default=None, help="the split's first N documents (default: all)")
    parser.add_argument("--max-tokens", default="8192", help="max_tokens_in_batch values, comma-separated")
    parser.add_argument("--baseline-dir", default=str(ROOT / "data" / "06_models" / "baseline"))
    parser.add_argument("--incremental-dir", default=str(ROOT / "data" / "06_models" / "incremental"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="auto", choices=["auto", "32", "bf16-mixed", "16-mixed"])
    args = parser.parse_args()

    from coref_pipeline.serving.coref_model import CorefModel, as_split_text

    shaped = ontonotes_shaped_documents(args.split, args.documents)
    budgets = [int(value) for value in args.max_tokens.split(",")]
    results: dict[str, object] = {"split": args.split, "documents": len(shaped), "device": args.device}
    print(f"host: {host()}; {len(shaped)} OntoNotes-shaped {args.split} documents", flush=True)
    for name, directory in (("baseline", args.baseline_dir), ("incremental", args.incremental_dir)):
        model = CorefModel.load(directory, device=args.device, precision=args.precision, max_inference_subtokens=10**6)
        documents = [
            model.jsonlines_document(as_split_text(item["sentences"]), None, item["doc_key"][:2], item["doc_key"][3:])
            for item in shaped
        ]
        subtokens = sum(len(document["subtoken_map"]) for document in documents)
        settings = {"one at a time": 0, **{f"batched, {budget} subtokens": budget for budget in budgets}}
        seconds: dict[str, list[float]] = {setting: [] for setting in settings}
        clusters: dict[str, list] = {}
        model.predict_documents(documents[:2], progress=False)  # warm-up: the first calls allocate
        for _ in range(args.rounds):
            for setting, budget in settings.items():
                started = time.perf_counter()
                predicted = model.predict_documents(documents, progress=False, max_tokens_in_batch=budget)
                seconds[setting].append(time.perf_counter() - started)
                clusters[setting] = [document["predicted_clusters"] for document in predicted]
        one = statistics.median(seconds["one at a time"])
        rows = {}
        for setting in settings:
            median = statistics.median(seconds[setting])
            differing = sum(
                this != one for this, one in zip(clusters[setting], clusters["one at a time"], strict=True)
            )  # documents whose clusters differ from one at a time
            rows[setting] = {
                "seconds": seconds[setting],
                "documents_per_s": len(documents) / median,
                "speed_up": one / median,
                "same_clusters_as_one_at_a_time": differing == 0,
                "documents_with_other_clusters": differing,
            }
            print(
                f"{name:<12} {setting:<28} {len(documents) / median:7.2f} documents/s ({subtokens} subtokens, "
                f"{model.precision}), {one / median:.2f}x one at a time, documents with other clusters: {differing}",
                flush=True,
            )
        results[name] = {"precision": model.precision, "subtokens": subtokens, "settings": rows}
    write_results(results, RESULTS / "batched_prediction.json")


if __name__ == "__main__":
    main()
