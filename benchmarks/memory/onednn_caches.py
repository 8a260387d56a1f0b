"""oneDNN's per-shape caches in a long CPU process: held to the project's bound, or at the libraries' own 1,024.

Run: python benchmarks/memory/onednn_caches.py [--workloads predict-baseline predict-incremental train-bf16]
         [--documents 1000] [--steps 60] [--rounds 1] [--models data/06_models]

oneDNN and ideep keep a compiled primitive for each shape they meet (``runtime/onednn.py``). torch sends them the
products it computes in bf16 on a CPU, and a document's or a crop's rows are a shape of their own. Each workload
runs in a process of its own in each configuration, the configurations taking turns in ``--rounds`` rounds:

- ``bounded``: the project's default: the environment leaves both caches unset, and the project holds them to
  ``ONEDNN_CACHE_CAPACITY`` primitives (``CorefModel``, the training engine);
- ``libraries``: both caches at the libraries' own capacity, 1,024 (``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` and
  ``LRU_CACHE_CAPACITY`` set, which the project leaves as they are).

Workloads:

- ``predict-baseline`` / ``predict-incremental``: the main job's model (``--models``: ``baseline``, ``incremental``)
  loaded at ``precision auto`` predicts ``--documents`` OntoNotes-shaped documents of OntoNotes train's lengths
  (``benchmarks/common.py``) one after another, as a server does (``CorefModel.predict`` on each document's words);
- ``train-bf16``: ``--steps`` training steps in bf16-mixed at the peer configuration (``PEER_CONFIGURATION``) on
  LitBank fold 0's training documents (../shared/corpora/litbank) from the packaged MiniLM.

Per workload and configuration it prints the seconds a document or a step (the mean after the first tenth of the
documents, or after the warm-up steps), the resident memory at the end and its highest value, the resident memory at
each tenth of the run, and the minor page faults; the host first. Where the CPU does not compute bf16 natively,
``auto`` is fp32 and the training runs emulated bf16: the program says so. Figures go to
``data/benchmarks/onednn_caches.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import json
import os
import resource
import statistics
import subprocess
import time

from benchmarks.common import ONEDNN_LIBRARIES_CACHES, ROOT, WARM_UP_STEPS, host, require_litbank, write_results
from coref_pipeline.runtime.onednn import ONEDNN_CACHE_ENVIRONMENT

WORKLOADS = ("predict-baseline", "predict-incremental", "train-bf16")
# The environment of each configuration: the project's default leaves the caches unset (it bounds them itself).
CONFIGURATIONS = {
    "bounded": {},
    "libraries": ONEDNN_LIBRARIES_CACHES,
}
SNAPSHOTS = 10  # resident memory recorded at each tenth of a run


def _predictions(model_directory: Path, documents: int) -> tuple[list[float], list[float]]:
    """Seconds of each document's prediction and the resident GiB after each, in this process."""
    from benchmarks.common import ontonotes_shaped_documents
    from coref_pipeline.runtime.devices import resident_bytes
    from coref_pipeline.serving.coref_model import CorefModel

    texts = [document["sentences"] for document in ontonotes_shaped_documents("train", limit=documents)]
    model = CorefModel.load(model_directory, precision="auto", for_prediction=True)
    seconds, resident = [], []
    for text in texts:
        start = time.perf_counter()
        model.predict(text)
        seconds.append(time.perf_counter() - start)
        resident.append(resident_bytes() / 2**30)
    return seconds, resident


def _training_steps(steps: int) -> tuple[list[float], list[float]]:
    """Seconds of each bf16-mixed peer step and the resident GiB after each, in this process."""
    from benchmarks.common import PEER_CONFIGURATION, cpu_minilm_settings, segmented_litbank, timed_training_steps
    from coref_pipeline.runtime.devices import resident_bytes

    model_config, training = cpu_minilm_settings({**PEER_CONFIGURATION, "precision": "bf16-mixed"})
    corpus = segmented_litbank(model_config.tokenizer_name, model_config.max_segment_len)
    resident: list[float] = []

    def after_step(step: int, trained: object) -> None:
        resident.append(resident_bytes() / 2**30)

    seconds = timed_training_steps(corpus, model_config, training, steps, after_step=after_step)
    return seconds[WARM_UP_STEPS:], resident[WARM_UP_STEPS:]


def child(workload: str, args: argparse.Namespace) -> dict[str, object]:
    """One workload in this process, its caches as the parent's environment sets them."""
    import torch

    from coref_pipeline.runtime.devices import native_bf16

    if workload == "train-bf16":
        seconds, resident = _training_steps(args.steps)
    else:
        seconds, resident = _predictions(args.models / workload.removeprefix("predict-"), args.documents)
        seconds = seconds[len(seconds) // SNAPSHOTS :]  # the first tenth: start-up and first shapes
    every = max(1, len(resident) // SNAPSHOTS)
    return {
        "native_bf16": native_bf16(torch.device("cpu")) is not None,
        "caches": {name: os.environ.get(name) for name in ONEDNN_CACHE_ENVIRONMENT},
        "count": len(seconds),
        "mean_seconds": statistics.mean(seconds),
        "median_seconds": statistics.median(seconds),
        "resident_end_gib": resident[-1],
        "resident_max_gib": max(resident),
        "resident_gib": [round(value, 3) for value in resident[every - 1 :: every]],
        "minor_faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--documents", type=int, default=1000, help="documents a prediction workload reads")
    parser.add_argument("--steps", type=int, default=60, help="steps of the training workload (3 warm-up steps)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds, the configurations taking turns")
    parser.add_argument("--models", type=Path, default=ROOT / "data/06_models", help="the main job's model folders")
    parser.add_argument("--child", choices=WORKLOADS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps <= WARM_UP_STEPS:
        parser.error(f"--steps must be more than the {WARM_UP_STEPS} warm-up steps")
    if args.documents < SNAPSHOTS:
        parser.error(f"--documents must be at least {SNAPSHOTS}")
    if args.child:
        print(json.dumps(child(args.child, args)))
        return
    if "train-bf16" in args.workloads:
        require_litbank()
    for workload in args.workloads:
        folder = args.models / workload.removeprefix("predict-")
        if workload != "train-bf16" and not (folder / "coref_config.json").is_file():
            sys.exit(f"{folder}: no model; run the main job first (README: kedro run ...)")
    print(f"host: {host()}")
    results: dict[str, dict[str, list[dict[str, object]]]] = {}
    for round_number in range(1, args.rounds + 1):
        for workload in args.workloads:
            for name, caches in CONFIGURATIONS.items():
                environment = {key: value for key, value in os.environ.items() if key not in ONEDNN_CACHE_ENVIRONMENT}
                done = subprocess.run(
                    [sys.executable, __file__, "--child", workload, *_passed(args)],
                    capture_output=True,
                    text=True,
                    env={**environment, **caches},
                    cwd=ROOT,
                )
                if done.returncode != 0:
                    sys.exit(f"{workload}, {name} failed: {(done.stderr.strip().splitlines() or ['(no message)'])[-1]}")
                measured = json.loads(done.stdout.strip().splitlines()[-1])
                results.setdefault(workload, {}).setdefault(name, []).append(measured)
                if not measured["native_bf16"]:
                    print(f"{workload}: this CPU computes no bf16 natively (auto is fp32; bf16 training is emulated)")
                unit = "a step" if workload == "train-bf16" else "a document"
                print(
                    f"round {round_number}, {workload}, {name} (caches {measured['caches']}): "
                    f"{measured['mean_seconds']:.3f} s {unit} (median {measured['median_seconds']:.3f}), resident "
                    f"{measured['resident_end_gib']:.2f} GiB at the end (highest {measured['resident_max_gib']:.2f}; "
                    f"each tenth: {', '.join(f'{value:.2f}' for value in measured['resident_gib'])}), "
                    f"{measured['minor_faults']:,} minor faults"
                )
    for workload, by_name in results.items():
        means = {name: statistics.median(run["mean_seconds"] for run in runs) for name, runs in by_name.items()}
        print(f"{workload}: bounded / libraries, seconds {means['bounded'] / means['libraries']:.2f}x")
    settings = {"documents": args.documents, "steps": args.steps, "rounds": args.rounds}
    write_results({**settings, "results": results}, ROOT / "data/benchmarks/onednn_caches.json")


def _passed(args: argparse.Namespace) -> list[str]:
    """The parent's settings, for a child."""
    return ["--documents", str(args.documents), "--steps", str(args.steps), "--models", str(args.models)]


if __name__ == "__main__":
    main()
