"""`coref-pipeline predict` on raw text, the whole command, against an earlier version's, side by side.

Run: python benchmarks/prediction/raw_text.py --previous SRC [--model DIR] [--rounds 5] [--work-dir DIR]

1. Two inputs: the README's one short text (``ada.txt``) and a folder of the 60 pronoun probes' texts
   (``data/01_raw/probes/pronoun_probes.jsonl``, one ``.txt`` file each), raw text that ``predict`` splits
   into sentences and words and then into the model's subtokens itself.
2. For each input, in each of ``--rounds`` rounds: ``coref-pipeline predict --model DIR IN OUT`` with its
   defaults, as a new process, by this checkout and by ``--previous SRC`` (the ``src`` folder of an earlier
   checkout, e.g. ``git worktree add ../previous HEAD~1``, put first on ``PYTHONPATH``), in turn, the order
   alternating between rounds; the whole command timed, from the process's start to its exit.
3. Prints each round's seconds and the paired ratio (previous / this), their medians, whether the two versions
   wrote the same bytes, and the host (``lscpu``'s model name).

Figures go to stdout and to ``WORK_DIR/results.json`` (default ``data/benchmarks/raw_text``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import json
import statistics

from benchmarks.common import PROBES, ROOT, coref_pipeline, host, write_results

WORK = ROOT / "data" / "benchmarks" / "raw_text"
README_TEXT = "Ada met Charles in 1833. He showed her his engine."


def write_inputs(work: Path) -> dict[str, Path]:
    """The README's text as one file, the probes' texts as a folder of files."""
    one = work / "ada.txt"
    one.write_text(README_TEXT + "\n", encoding="utf-8")
    folder = work / "probes"
    folder.mkdir(parents=True, exist_ok=True)
    for index, line in enumerate(PROBES.read_text(encoding="utf-8").splitlines()):
        (folder / f"probe{index:02d}.txt").write_text(json.loads(line)["text"] + "\n", encoding="utf-8")
    return {"one text": one, "60 texts": folder}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--previous", type=Path, required=True, help="the src folder of an earlier version")
    parser.add_argument("--model", type=Path, default=ROOT / "data" / "06_models" / "baseline")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work-dir", type=Path, default=WORK)
    args = parser.parse_args()
    if not (args.previous / "coref_pipeline").is_dir():
        sys.exit(f"--previous {args.previous}: not a src folder holding coref_pipeline")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    inputs = write_inputs(args.work_dir)
    versions = {"this": None, "previous": args.previous.resolve()}
    results: dict[str, dict] = {"host": host(), "model": str(args.model), "rounds": args.rounds, "inputs": {}}
    for name, source in inputs.items():
        seconds: dict[str, list[float]] = {version: [] for version in versions}
        for round_index in range(args.rounds):
            order = list(versions) if round_index % 2 == 0 else list(reversed(versions))
            for version in order:
                output = args.work_dir / f"{version}.{source.stem}.jsonl"
                command = ("predict", "--model", str(args.model), str(source), str(output))
                seconds[version].append(coref_pipeline(*command, source_tree=versions[version]))
        ratios = [previous / this for previous, this in zip(seconds["previous"], seconds["this"], strict=True)]
        outputs = [(args.work_dir / f"{version}.{source.stem}.jsonl").read_bytes() for version in versions]
        same = outputs[0] == outputs[1]
        row = {
            "seconds": seconds,
            "median_seconds": {version: statistics.median(values) for version, values in seconds.items()},
            "previous_over_this": ratios,
            "median_previous_over_this": statistics.median(ratios),
            "same_output": same,
        }
        results["inputs"][name] = row
        print(
            f"{name:9} this {row['median_seconds']['this']:.2f} s, previous {row['median_seconds']['previous']:.2f} s "
            f"(medians of {args.rounds}); previous / this, paired: {row['median_previous_over_this']:.3f}x "
            f"({min(ratios):.3f}-{max(ratios):.3f}); same output: {same}"
        )
    print(f"host: {results['host']}")
    write_results(results, args.work_dir / "results.json")


if __name__ == "__main__":
    main()
