"""Peak memory of inference against document length: the baseline and the incremental model.

Run: python benchmarks/memory.py [--lengths 500,1000,2000,4000,8000,16000]
         [--baseline-dir DIR] [--incremental-dir DIR]

Documents of about each length (in subtokens) are made by concatenating the shared
LitBank test and train documents (segmented at the model's segment length) and
cutting at a segment boundary. Each (model, length) runs in a fresh Python process
that loads the model, tensorizes the document, then predicts; the measure is the
process's peak resident set size (``getrusage(RUSAGE_SELF).ru_maxrss``), reported
in full and as the increase over the process's resident size just before
predicting (weights and libraries loaded).

Models: the benchmarks' trained models when present
(``data/benchmarks/{baseline,incremental}_litbank/run/best``); without a trained
incremental model, one built from the baseline's weights (memory does not depend
on training). Writes ``data/08_reporting/memory.json`` and ``memory.png``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "data" / "benchmarks"
REPORTING = ROOT / "data" / "08_reporting"


def concatenated_document(documents: list[dict], length: int) -> dict:
    """One jsonlines document of whole segments, about ``length`` subtokens, from consecutive documents."""
    merged = {"doc_key": f"nw/concatenated_{length}", "sentences": [], "speakers": [], "clusters": []}
    merged["sentence_map"], merged["subtoken_map"] = [], []
    tokens = sentence_offset = word_offset = 0
    for document in documents:
        for index, segment in enumerate(document["sentences"]):
            if tokens >= length:
                break
            start = sum(len(s) for s in document["sentences"][:index])
            stop = start + len(segment)
            merged["sentences"].append(segment)
            merged["speakers"].append(document["speakers"][index])
            merged["sentence_map"] += [s + sentence_offset for s in document["sentence_map"][start:stop]]
            merged["subtoken_map"] += [w + word_offset for w in document["subtoken_map"][start:stop]]
            tokens += len(segment)
        sentence_offset = merged["sentence_map"][-1] + 1
        word_offset = merged["subtoken_map"][-1] + 1
        if tokens >= length:
            break
    if tokens < length:
        raise SystemExit(f"the corpus has only {tokens} subtokens; cannot make a document of {length}")
    return merged


def worker(model_dir: str, document_path: str) -> None:
    """Load, tensorize, predict; print the memory figures as JSON (runs in a fresh process)."""
    import torch

    from coref_pipeline.runtime.devices import resident_bytes
    from coref_pipeline.serving.coref_model import CorefModel

    torch.set_grad_enabled(False)
    trained = CorefModel.load(model_dir)
    document = json.loads(Path(document_path).read_text())
    tensors = trained.tensorize(document)
    before = resident_bytes() / 2**20
    started = time.perf_counter()
    clusters = trained.predict_tensors(tensors)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "subtokens": tensors.num_tokens,
                "peak_rss_mb": peak,
                "rss_before_predict_mb": before,
                "increase_mb": peak - before,
                "seconds": seconds,
                "clusters": len(clusters),
            }
        )
    )


def incremental_dir(baseline_dir: Path, requested: Path | None, scratch: Path) -> Path:
    if requested is not None:
        return requested
    trained = BENCHMARKS / "incremental_litbank" / "run" / "best"
    if (trained / "coref_config.json").is_file():
        return trained
    from coref_pipeline.models.config import IncrementalConfig
    from coref_pipeline.serving.coref_model import CorefModel
    from coref_pipeline.training import build_incremental

    baseline = CorefModel.load(baseline_dir)
    model = build_incremental(baseline, IncrementalConfig.from_baseline(baseline.config, {}))
    model.save(scratch / "incremental")
    return scratch / "incremental"


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6.5, 4))
    for model, marker in (("baseline", "o"), ("incremental", "s")):
        points = sorted((r["subtokens"], r["peak_rss_mb"]) for r in rows if r["model"] == model)
        axis.plot([p[0] for p in points], [p[1] / 1024 for p in points], marker=marker, label=model)
    axis.set_xscale("log", base=2)
    axis.set_xlabel("document length (subtokens)")
    axis.set_ylabel("peak resident memory (GiB)")
    axis.set_title("Inference memory against document length (CPU)")
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="500,1000,2000,4000,8000,16000")
    parser.add_argument("--baseline-dir", type=Path, default=BENCHMARKS / "baseline_litbank" / "run" / "best")
    parser.add_argument("--incremental-dir", type=Path, default=None)
    parser.add_argument("--worker", nargs=2, metavar=("MODEL_DIR", "DOCUMENT_JSON"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    if not (args.baseline_dir / "coref_config.json").is_file():
        sys.exit(f"no baseline model at {args.baseline_dir}: run benchmarks/baseline.py first")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from baseline import segmented_litbank

    from coref_pipeline.serving.coref_model import CorefModel

    config = CorefModel.load(args.baseline_dir).config
    segmented = segmented_litbank(config.tokenizer_name, config.max_segment_len)
    corpus = segmented.documents("test", config.max_segment_len) + segmented.documents("train", config.max_segment_len)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        models = {
            "baseline": args.baseline_dir,
            "incremental": incremental_dir(args.baseline_dir, args.incremental_dir, scratch),
        }
        for length in [int(x) for x in args.lengths.split(",")]:
            path = scratch / f"document_{length}.json"
            path.write_text(json.dumps(concatenated_document(corpus, length)))
            for model, directory in models.items():
                command = [sys.executable, __file__, "--worker", str(directory), str(path)]
                result = subprocess.run(command, capture_output=True, text=True)
                if result.returncode != 0:
                    sys.exit(f"{model} at {length} failed:\n{result.stderr[-2000:]}")
                row = {"model": model, "target_length": length, **json.loads(result.stdout.strip().splitlines()[-1])}
                rows.append(row)
                print(
                    f"{model:<12} {row['subtokens']:>6} subtokens: peak RSS {row['peak_rss_mb']:>8.0f} MB "
                    f"(+{row['increase_mb']:.0f} MB while predicting), {row['seconds']:.1f} s",
                    flush=True,
                )
    incremental = {r["target_length"]: r["peak_rss_mb"] for r in rows if r["model"] == "incremental"}
    baseline = {r["target_length"]: r["peak_rss_mb"] for r in rows if r["model"] == "baseline"}
    summary = {"measure": "peak resident set size of a fresh process per (model, length), ru_maxrss", "rows": rows}
    if 1000 in incremental and 16000 in incremental:
        summary["incremental_16k_over_1k"] = incremental[16000] / incremental[1000]
        summary["baseline_16k_over_1k"] = baseline[16000] / baseline[1000]
        print(f"incremental peak at 16k / at 1k: {summary['incremental_16k_over_1k']:.3f} (goal <= 1.15)")
        print(f"baseline peak at 16k / at 1k: {summary['baseline_16k_over_1k']:.3f}")
    REPORTING.mkdir(parents=True, exist_ok=True)
    (REPORTING / "memory.json").write_text(json.dumps(summary, indent=2) + "\n")
    plot(rows, REPORTING / "memory.png")
    print(f"wrote {REPORTING / 'memory.json'} and {REPORTING / 'memory.png'}")


if __name__ == "__main__":
    main()
