"""Throughput of preprocess + segment on the shared LitBank train split (169k words).

Run: python benchmarks/preprocessing/preprocess.py [--repeats 3] [--compare-dir DIR]

Times the pipeline's own node functions end to end, file to file: read the
CoNLL file, parse it (preprocess), write and read the word-level Parquet,
tokenize and segment, write the jsonlines. Two figures:

* one length at a time: the whole chain run for a single ``max_segment_len``;
* all four lengths in one run, as ``kedro run --pipelines=preprocess,segment``
  does (the file is read and tokenized once): words/s per length is
  4 x words / total seconds.

``--compare-dir`` holds the original ``minimize.py``'s output for the same
file (``train.english.{N}.jsonlines``); every line is compared byte for byte
with ours (without the added ``tokens`` field).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import json
import tempfile
import time

import pandas as pd

from benchmarks.common import ROOT
from coref_pipeline.files import write_jsonlines
from coref_pipeline.formats.conll import ConllFile
from coref_pipeline.formats.corpus import preprocess_corpus
from coref_pipeline.formats.segmentation import segment_words
from coref_pipeline.pretrained import load_tokenizer

TRAIN = ROOT.parent / "shared" / "corpora" / "litbank" / "train.conll"
LENGTHS = [128, 256, 384, 512]


def run_chain(tokenizer, lengths: list[int], workdir: Path) -> tuple[float, int, dict[int, Path]]:
    """File to file for the given lengths; returns seconds, words and the jsonlines paths."""
    start = time.perf_counter()
    frame = preprocess_corpus(ConllFile.read(TRAIN))
    parquet = workdir / "train.word_documents.parquet"
    frame.to_parquet(parquet)
    frame = pd.read_parquet(parquet)
    by_length = segment_words(frame, tokenizer, lengths, include_tokens=True, description="benchmark")
    paths = {}
    for length, documents in by_length.items():
        paths[length] = workdir / f"train.english.{length}.jsonlines"
        write_jsonlines(paths[length], documents)
    seconds = time.perf_counter() - start
    return seconds, int(frame["words"].map(len).sum()), paths


def compare(paths: dict[int, Path], compare_dir: Path) -> None:
    for length, path in paths.items():
        ours = path.read_text(encoding="utf-8").splitlines()
        original = (compare_dir / f"train.english.{length}.jsonlines").read_text(encoding="utf-8").splitlines()
        same = len(ours) == len(original)
        for line, reference in zip(ours, original, strict=False):
            document = json.loads(line)
            document.pop("tokens", None)
            same &= json.dumps(document) == reference
        print(f"  seg {length}: {len(ours)} documents, byte-identical to minimize.py: {same}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compare-dir", type=Path)
    args = parser.parse_args()
    if not TRAIN.is_file():
        sys.exit(f"shared LitBank corpus not found at {TRAIN}")
    tokenizer = load_tokenizer("embedded:minilm")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        print(f"{TRAIN} with the embedded MiniLM tokenizer; best of {args.repeats} runs")
        for length in LENGTHS:
            best = min(run_chain(tokenizer, [length], workdir)[0] for _ in range(args.repeats))
            words = run_chain(tokenizer, [length], workdir)[1]
            print(f"  seg {length}: {best:.3f} s for {words} words = {words / best:,.0f} words/s (one length)")
        runs = [run_chain(tokenizer, LENGTHS, workdir) for _ in range(args.repeats)]
        best, words, paths = min(runs, key=lambda run: run[0])
        print(f"  all four lengths in one run: {best:.3f} s = {len(LENGTHS) * words / best:,.0f} words/s per length")
        if args.compare_dir:
            compare(paths, args.compare_dir)


if __name__ == "__main__":
    main()
