"""`CorefModel.predict` on raw text of growing length: time and peak memory, both models.

Run: python benchmarks/predict.py [--words 1000,5000,20000]
         [--baseline-dir data/06_models/baseline] [--incremental-dir data/06_models/incremental]

The text is the shared LitBank train and test documents' words, sentences joined by a
space and documents by a blank line, cut after the first sentence that reaches the
length. Each (model, length) runs in a fresh Python process: load the model, split a
short text once (loads NLTK and pySBD), then ``predict(text)``, timing the sentence and
word splitting separately. Memory is the process's peak resident set size
(``ru_maxrss``) and its increase over the size just before predicting.
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
LITBANK = ROOT.parent / "shared" / "corpora" / "litbank"


def litbank_text(num_words: int) -> str:
    """About ``num_words`` words of LitBank as plain text (whole sentences)."""
    from coref_pipeline.formats.conll import read_conll

    paragraphs, count = [], 0
    for name in ("train.conll", "test.conll"):
        for document in read_conll(LITBANK / name):
            sentences: dict[int, list[str]] = {}
            for word, sentence in zip(document.words, document.sentence_ids, strict=True):
                sentences.setdefault(sentence, []).append(word)
            kept = []
            for words in sentences.values():
                kept.append(" ".join(words))
                count += len(words)
                if count >= num_words:
                    break
            paragraphs.append(" ".join(kept))
            if count >= num_words:
                return "\n\n".join(paragraphs)
    raise SystemExit(f"LitBank has only {count} words")


def worker(model_dir: str, text_path: str) -> None:
    """Load, split, predict; print the figures as JSON (runs in a fresh process)."""
    from coref_pipeline import CorefModel
    from coref_pipeline.formats.text import split_text
    from coref_pipeline.runtime.devices import resident_bytes

    model = CorefModel.load(model_dir, max_inference_subtokens=10**6)
    text = Path(text_path).read_text(encoding="utf-8")
    split_text("Warm up. The tools load once.")
    before = resident_bytes() / 2**20
    started = time.perf_counter()
    split = split_text(text)
    split_seconds = time.perf_counter() - started
    started = time.perf_counter()
    result = model.predict(text)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    subtokens = len(result.document["subtoken_map"]) if result.document else 0
    print(
        json.dumps(
            {
                "words": len(split.words),
                "sentences": len(split.sentence_ends),
                "subtokens": subtokens,
                "clusters": len(result.clusters),
                "split_seconds": round(split_seconds, 2),
                "predict_seconds": round(seconds, 2),
                "peak_rss_mb": round(peak, 1),
                "increase_mb": round(peak - before, 1),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--words", default="1000,5000,20000")
    parser.add_argument("--baseline-dir", default=str(ROOT / "data" / "06_models" / "baseline"))
    parser.add_argument("--incremental-dir", default=str(ROOT / "data" / "06_models" / "incremental"))
    args = parser.parse_args()
    lengths = [int(value) for value in args.words.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for length in lengths:
            text_path = Path(scratch) / f"text_{length}.txt"
            text_path.write_text(litbank_text(length), encoding="utf-8")
            for name, directory in (("incremental", args.incremental_dir), ("baseline", args.baseline_dir)):
                completed = subprocess.run(
                    [sys.executable, __file__, "--worker", directory, str(text_path)],
                    capture_output=True,
                    text=True,
                )
                if completed.returncode != 0:
                    raise SystemExit(completed.stderr[-3000:])
                row = {"model": name, **json.loads(completed.stdout.strip().splitlines()[-1])}
                rows.append(row)
                print(json.dumps(row), flush=True)
    header = ["model", "words", "subtokens", "split_seconds", "predict_seconds", "peak_rss_mb", "increase_mb"]
    print("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(row[key]) for key in header) + " |")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
    else:
        main()
