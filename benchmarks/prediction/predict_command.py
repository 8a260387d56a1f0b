"""`coref-pipeline predict` as a user runs it: the whole command, a fresh process each, on LitBank test, both models.

Run: python benchmarks/prediction/predict_command.py --baseline-dir DIR --incremental-dir DIR [--rounds 3]
     [--work-dir DIR]

1. Writes LitBank test (../shared/corpora/litbank/test.conll) as Joshi-format jsonlines with
   ``coref-pipeline minimize``, segmented with the baseline's own tokenizer at its segment length
   (the incremental model reads the same: its tokenizer is its baseline's).
2. Runs ``coref-pipeline predict --model DIR test.jsonlines OUT`` for the baseline, then the
   incremental model, in turn, ``--rounds`` times, each a new process with the command's defaults
   (``--precision auto``, or ``--precision``); times each whole command (start to exit) and scores each output with the
   test key without singletons (as the LitBank benchmarks score).
3. Prints each round's seconds and the incremental / baseline ratio, and their median.

Figures go to stdout and to ``data/benchmarks/predict_command/results.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import json
import statistics

from benchmarks.common import LITBANK, ROOT, coref_pipeline, host, test_f1

WORK = ROOT / "data" / "benchmarks" / "predict_command"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline-dir", type=Path, required=True)
    parser.add_argument("--incremental-dir", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work-dir", type=Path, default=WORK)
    parser.add_argument(
        "--precision", default="auto", choices=["auto", "32", "bf16-mixed"], help="predict's --precision (its default)"
    )
    args = parser.parse_args()
    if not (LITBANK / "test.conll").is_file():
        sys.exit(f"shared LitBank corpus not found at {LITBANK}")
    from coref_pipeline.models.directory import ModelDirectoryError, segments_read_by

    try:
        tokenizer, length = segments_read_by(args.baseline_dir)
    except ModelDirectoryError as error:
        sys.exit(f"--baseline-dir: {error}")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    test = args.work_dir / "test.jsonlines"
    coref_pipeline(
        "minimize", "--tokenizer", tokenizer, "--seg-len", str(length), str(LITBANK / "test.conll"), str(test)
    )
    models = {"baseline": args.baseline_dir, "incremental": args.incremental_dir}
    rounds = []
    for _ in range(args.rounds):
        seconds = {
            name: coref_pipeline(
                "predict",
                "--model",
                str(directory),
                "--precision",
                args.precision,
                str(test),
                str(args.work_dir / f"{name}.jsonl"),
            )
            for name, directory in models.items()
        }
        rounds.append({**seconds, "ratio": seconds["incremental"] / seconds["baseline"]})
        print(
            f"baseline {seconds['baseline']:.1f} s, incremental {seconds['incremental']:.1f} s: "
            f"{rounds[-1]['ratio']:.2f}x"
        )
    results = {
        "host": host(),
        "precision": args.precision,
        "documents": sum(1 for line in test.read_text().splitlines() if line.strip()),
        "rounds": rounds,
        "median_ratio": statistics.median(r["ratio"] for r in rounds),
        "test_conll_f1": {name: test_f1(args.work_dir / f"{name}.jsonl") for name in models},
    }
    (args.work_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"host {results['host']}; {results['documents']} test documents")
    print(f"median incremental / baseline: {results['median_ratio']:.2f}x; test CoNLL F1 {results['test_conll_f1']}")


if __name__ == "__main__":
    main()
