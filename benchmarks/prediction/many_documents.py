"""`coref-pipeline predict` over many short documents: its peak memory as the count grows, a killed run going on,
and its time against an earlier version's.

Run: python benchmarks/prediction/many_documents.py [--model DIR] [--counts 1000 8000] [--precision 32]
     [--previous SRC] [--rounds 1] [--kill-at 0.5] [--work-dir DIR]
     python benchmarks/prediction/many_documents.py --budgets 0 256 512 1024 2048 [--ontonotes 60] [--rounds 2]
     python benchmarks/prediction/many_documents.py --workers 1 2 [--counts 3000] [--ontonotes 60] [--rounds 3]

1. Inputs: for each of ``--counts``, a ``.jsonl`` file of that many text records (``{"doc_key", "text"}``), the
   60 pronoun probes' texts (``data/01_raw/probes/pronoun_probes.jsonl``, about 17 words each) cycled, each record
   its own ``doc_key``: many short documents, where what a run holds for each document shows most against what
   the model holds.
2. For each count, ``--rounds`` times: ``coref-pipeline predict --model DIR --precision P IN OUT`` as a new
   process, the whole command timed, its peak resident memory read from the kernel (``wait4``'s ``ru_maxrss``);
   with ``--previous SRC`` (the ``src`` folder of an earlier checkout, e.g. ``git worktree add ../previous
   HEAD~1``, put first on ``PYTHONPATH``) that version's command too, in turn, the order alternating between
   rounds, and whether the two wrote the same bytes.
3. For each version: the growth of the peak resident memory per document from the smallest count to the largest
   (KB per document, and what that would be for a million such documents).
4. A killed run going on (this version, the largest count): ``predict`` is started, killed with SIGKILL once
   ``--kill-at`` of the documents are in ``OUT.partial``, then run again with the same arguments; the second
   run's log line on the documents it kept, its seconds, and whether its output is the same bytes as an
   uninterrupted run's (step 2's).
5. The host: ``lscpu``'s model name.

With ``--budgets``, instead of 2-4: the encoder budget on a CPU. On the smallest count's texts and on
``--ontonotes`` OntoNotes-shaped documents (``benchmarks/common.ontonotes_shaped_documents``, as sentence
records), ``predict --batch-tokens B`` for each budget (0: one document at a time), ``--rounds`` times, the order
alternating: the median seconds, each budget's documents/s against the first's (the median of the rounds' ratios),
the peak memory, and whether every budget wrote the same bytes. With ``--workers``, the same for ``predict
--workers N`` at each count, on LitBank test too (as ``throughput.py`` writes it); the peak memory is then the
largest process's (the workers share the model's pages with the process they were forked from).

Figures go to stdout and to ``WORK_DIR/results.json`` (default ``data/benchmarks/many_documents``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import json
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Sequence

from benchmarks.common import (
    LITBANK,
    ROOT,
    host,
    measured_process,
    probe_texts,
    with_source_tree,
    write_litbank_test,
    write_results,
)
from coref_pipeline.files import ResumableJsonLines

WORK = ROOT / "data" / "benchmarks" / "many_documents"
KILL_POLL_S = 0.02  # how often the killed run's partial file is counted


def write_input(path: Path, count: int) -> Path:
    """``count`` text records, the probes' texts cycled, at ``path``."""
    with path.open("w", encoding="utf-8") as out:
        for index, text in enumerate(probe_texts(count)):
            out.write(json.dumps({"doc_key": f"short/{index:07d}", "text": text}) + "\n")
    return path


def predict_command(args: argparse.Namespace, source: Path, output: Path, options: Sequence[str] = ()) -> list[str]:
    return [sys.executable, "-m", "coref_pipeline", "predict", "--model", str(args.model)] + [
        "--precision",
        args.precision,
        *options,
        str(source),
        str(output),
    ]


def run_predict(
    args: argparse.Namespace, source: Path, output: Path, source_tree: Path | None, options: Sequence[str] = ()
) -> dict:
    """One whole command (``options`` added), a new process: its seconds, peak resident memory (MB) and log."""
    log = output.with_suffix(".stderr")
    command = predict_command(args, source, output, options)
    measured = measured_process(command, with_source_tree(os.environ, source_tree), log, f"predict on {source.name}")
    return {**measured, "log": log.read_text()}


def write_ontonotes_shaped(path: Path, count: int) -> Path:
    """``count`` OntoNotes-shaped documents as sentence records at ``path``."""
    from benchmarks.common import ontonotes_shaped_documents

    with path.open("w", encoding="utf-8") as out:
        for document in ontonotes_shaped_documents("test", limit=count):
            out.write(json.dumps({"doc_key": document["doc_key"], "sentences": document["sentences"]}) + "\n")
    return path


def option_sweep(args: argparse.Namespace, sources: dict[str, Path], flag: str, values: Sequence[int]) -> dict:
    """``predict FLAG VALUE`` for each of ``values`` on each source, this version, rounds alternating."""
    results: dict[str, dict] = {}
    name_of = flag.removeprefix("--").replace("-", "_")
    for name, source in sources.items():
        runs: dict[int, list[dict]] = {value: [] for value in values}
        for round_index in range(args.rounds):
            order = values if round_index % 2 == 0 else list(reversed(values))
            for value in order:
                output = args.work_dir / f"{name_of}{value}.{source.stem}.jsonl"
                runs[value].append(run_predict(args, source, output, None, [flag, str(value)]))
        outputs = {(args.work_dir / f"{name_of}{value}.{source.stem}.jsonl").read_bytes() for value in values}
        row = {
            str(value): {
                "seconds": [run["seconds"] for run in measured],
                "median_seconds": statistics.median(run["seconds"] for run in measured),
                "peak_memory_mb": max(run["peak_memory_mb"] for run in measured),
            }
            for value, measured in runs.items()
        }
        first = runs[values[0]]
        for value, measured in runs.items():  # each value's time against the first's, round by round
            row[str(value)]["first_over_this_seconds"] = statistics.median(
                a["seconds"] / b["seconds"] for a, b in zip(first, measured, strict=True)
            )
        results[name] = {name_of: row, "same_output": len(outputs) == 1}
        print(
            f"{name}: "
            + "; ".join(
                f"{flag} {value} {row[str(value)]['median_seconds']:.2f} s "
                f"({row[str(value)]['first_over_this_seconds']:.2f}x {values[0]}'s documents/s), "
                f"peak {row[str(value)]['peak_memory_mb']:.1f} MB"
                for value in values
            )
            + f" (medians of {args.rounds}); the same bytes at every value: {len(outputs) == 1}"
        )
    return results


def lines_in(path: Path) -> int:
    """Complete lines in ``path`` (0 where it is not there yet)."""
    try:
        with path.open("rb") as records:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: records.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


def killed_and_resumed(args: argparse.Namespace, source: Path, count: int, whole: Path) -> dict:
    """``predict`` killed with SIGKILL once ``--kill-at`` of ``count`` records are written, then run again."""
    output = args.work_dir / f"resumed.{source.stem}.jsonl"
    files = ResumableJsonLines(output, {})  # its file names, the ones predict writes (nothing opened)
    partial = files.partial
    for leftover in (output, partial, files.settings_path):
        leftover.unlink(missing_ok=True)
    target = max(1, round(args.kill_at * count))
    child = subprocess.Popen(
        predict_command(args, source, output),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while child.poll() is None and lines_in(partial) < target:
        time.sleep(KILL_POLL_S)
    if child.poll() is not None:
        sys.exit(f"predict on {source.name} ended before {target} records were written: nothing to kill")
    child.send_signal(signal.SIGKILL)
    child.wait()
    at_kill = lines_in(partial)
    second = run_predict(args, source, output, None)
    kept = [line for line in second["log"].splitlines() if "Going on from a run before" in line]
    return {
        "records_at_kill": at_kill,
        "kept_log": kept[0][kept[0].index("Going on") :].split(" in ")[0] if kept else None,
        "seconds_after_kill": second["seconds"],
        "same_output_as_whole_run": output.read_bytes() == whole.read_bytes(),
        "partial_left": partial.exists(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=ROOT / "data" / "06_models" / "baseline")
    parser.add_argument("--counts", type=int, nargs="+", default=[1000, 8000])
    parser.add_argument("--precision", default="32", help="predict's --precision (32: the same bytes at any batching)")
    parser.add_argument("--previous", type=Path, help="the src folder of an earlier version, run side by side")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--kill-at", type=float, default=0.5, help="the share of the documents written at the kill")
    parser.add_argument("--budgets", type=int, nargs="+", help="instead: predict --batch-tokens at each budget")
    parser.add_argument("--workers", type=int, nargs="+", help="instead: predict --workers at each number")
    parser.add_argument("--ontonotes", type=int, default=60, help="OntoNotes-shaped documents of the budget sweep")
    parser.add_argument("--work-dir", type=Path, default=WORK)
    args = parser.parse_args()
    if not (args.model / "model.safetensors").is_file():
        sys.exit(f"--model {args.model}: no model.safetensors there (the main job writes data/06_models/baseline)")
    if args.previous is not None and not (args.previous / "coref_pipeline").is_dir():
        sys.exit(f"--previous {args.previous}: not a src folder holding coref_pipeline")
    if not 0 < args.kill_at < 1:
        sys.exit(f"--kill-at {args.kill_at}: a share between 0 and 1")
    counts = sorted(set(args.counts))
    args.work_dir.mkdir(parents=True, exist_ok=True)
    versions = {"this": None, **({"previous": args.previous.resolve()} if args.previous else {})}
    results: dict[str, object] = {
        "model": str(args.model),
        "precision": args.precision,
        "rounds": args.rounds,
        "counts": {},
    }
    if args.budgets or args.workers:
        sources = {
            f"{counts[0]} texts": write_input(args.work_dir / f"short{counts[0]}.jsonl", counts[0]),
            f"{args.ontonotes} OntoNotes-shaped": write_ontonotes_shaped(
                args.work_dir / f"ontonotes{args.ontonotes}.jsonl", args.ontonotes
            ),
        }
        if args.budgets:
            results["budget_sweep"] = option_sweep(args, sources, "--batch-tokens", args.budgets)
        if args.workers:
            if (LITBANK / "test.conll").is_file():
                sources["LitBank test"] = write_litbank_test(args.model, args.work_dir / "litbank_test.jsonlines")
            else:
                print(f"LitBank test left out: {LITBANK} holds no test.conll")
            results["workers_sweep"] = option_sweep(args, sources, "--workers", args.workers)
        print(f"host: {host()}")
        write_results(results, args.work_dir / "results.json")
        return
    for count in counts:
        source = write_input(args.work_dir / f"short{count}.jsonl", count)
        runs: dict[str, list[dict]] = {version: [] for version in versions}
        for round_index in range(args.rounds):
            order = list(versions) if round_index % 2 == 0 else list(reversed(versions))
            for version in order:
                output = args.work_dir / f"{version}.{source.stem}.jsonl"
                run = run_predict(args, source, output, versions[version])
                runs[version].append({key: value for key, value in run.items() if key != "log"})
        row: dict[str, object] = {}
        for version, measured in runs.items():
            seconds = statistics.median(run["seconds"] for run in measured)
            row[version] = {
                "seconds": seconds,
                "documents_per_s": count / seconds,
                "peak_memory_mb": max(run["peak_memory_mb"] for run in measured),
            }
        if "previous" in versions:
            row["previous_over_this_seconds"] = statistics.median(
                p["seconds"] / t["seconds"] for p, t in zip(runs["previous"], runs["this"], strict=True)
            )
            outputs = [(args.work_dir / f"{version}.{source.stem}.jsonl").read_bytes() for version in versions]
            row["same_output"] = outputs[0] == outputs[1]
        results["counts"][str(count)] = row
        print(
            f"{count:>8} documents: "
            + "; ".join(
                f"{version} {row[version]['seconds']:.1f} s ({row[version]['documents_per_s']:.1f} documents/s), "
                f"peak {row[version]['peak_memory_mb']:.1f} MB"
                for version in versions
            )
            + (
                f"; previous / this {row['previous_over_this_seconds']:.3f}x, same output: {row['same_output']}"
                if "previous" in versions
                else ""
            )
        )
    if len(counts) > 1:
        small, large = str(counts[0]), str(counts[-1])
        growth = {}
        for version in versions:
            per_document_kb = (
                1024
                * (
                    results["counts"][large][version]["peak_memory_mb"]
                    - results["counts"][small][version]["peak_memory_mb"]
                )
                / (counts[-1] - counts[0])
            )
            growth[version] = {
                "kb_per_document": per_document_kb,
                "mb_per_million_documents": per_document_kb * 1e6 / 1024,
            }
            print(
                f"{version}: peak memory {per_document_kb:+.3f} KB a document from {small} to {large} documents "
                f"({per_document_kb * 1e6 / 1024:+,.0f} MB for a million such documents)"
            )
        results["memory_growth"] = growth
    largest = counts[-1]
    resumed = killed_and_resumed(
        args, args.work_dir / f"short{largest}.jsonl", largest, args.work_dir / f"this.short{largest}.jsonl"
    )
    results["killed_and_resumed"] = {"documents": largest, **resumed}
    print(
        f"killed at {resumed['records_at_kill']} of {largest} records; run again: {resumed['kept_log']}; "
        f"{resumed['seconds_after_kill']:.1f} s; the same bytes as an uninterrupted run: "
        f"{resumed['same_output_as_whole_run']}; partial file left: {resumed['partial_left']}"
    )
    print(f"host: {host()}")
    write_results(results, args.work_dir / "results.json")


if __name__ == "__main__":
    main()
