"""The fp32 training step with its products on oneDNN (``runtime/onednn.py``) against torch's own path (MKL).

Run: python benchmarks/training/onednn_products.py [--steps 60] [--rounds 1] [--configurations mkl onednn ...]

The baseline's training step at the peer configuration (``PEER_CONFIGURATION`` of benchmarks/common.py: crops of 3
segments of 384 subtokens, ffnn 1000, 50 antecedents) in fp32, on LitBank fold 0's training documents in order
(../shared/corpora/litbank) from the packaged MiniLM, ``--steps`` steps in each of these configurations, each a
process of its own, taking turns in ``--rounds`` rounds:

- ``mkl``: torch's own fp32 path (the engine's route turned off in the process: MKL's products on an x86 CPU);
- ``onednn``: the default on a CPU whose AVX-512 kernels torch runs: the products on oneDNN, oneDNN's and ideep's
  per-shape caches held to ``ONEDNN_CACHE_CAPACITY`` primitives (``runtime/onednn.py``);
- ``onednn-uncached``: the same with both caches off (0 and 1 primitives);
- ``onednn-1024``: the same with both caches at the libraries' own capacity (1,024).

Per configuration it prints the mean and the median seconds a step (the first 3 steps left out), the resident
memory after the last step and its highest value after any step, and the minor page faults of the timed steps;
the host first. Figures go to ``data/benchmarks/onednn_products.json``. On a CPU below AVX-512 (or torch held
there) the engine takes no route and ``onednn`` is ``mkl``: the program says so.
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

from benchmarks.common import (
    ONEDNN_LIBRARIES_CACHES,
    PEER_CONFIGURATION,
    ROOT,
    WARM_UP_STEPS,
    cpu_minilm_settings,
    host,
    require_litbank,
    segmented_litbank,
    timed_training_steps,
    write_results,
)

CONFIGURATIONS = ("mkl", "onednn", "onednn-uncached", "onednn-1024")
# The caches' environment of the configurations that set it (the default's is the engine's own).
CACHES = {
    "onednn-uncached": {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "0", "LRU_CACHE_CAPACITY": "1"},
    "onednn-1024": ONEDNN_LIBRARIES_CACHES,
}


def child(configuration: str, steps: int) -> dict[str, object]:
    """``steps`` fp32 peer steps in this process, as ``configuration`` sets them."""
    import torch

    from coref_pipeline.runtime import onednn
    from coref_pipeline.runtime.devices import resident_bytes
    from coref_pipeline.training import engine

    if configuration == "mkl":
        engine.onednn_products_reason = lambda device: None  # the engine's route off: torch's own path
    routed = onednn.onednn_products_reason(torch.device("cpu")) is not None and configuration != "mkl"
    model_config, training = cpu_minilm_settings({**PEER_CONFIGURATION, "precision": "32"})
    corpus = segmented_litbank(model_config.tokenizer_name, model_config.max_segment_len)
    resident: list[float] = []
    faults: list[int] = []

    def after_step(step: int, trained: object) -> None:
        resident.append(resident_bytes() / 2**30)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)

    seconds = timed_training_steps(corpus, model_config, training, steps, after_step=after_step)
    timed = seconds[WARM_UP_STEPS:]
    return {
        "configuration": configuration,
        "routed": routed,
        "steps": len(timed),
        "mean_seconds": statistics.mean(timed),
        "median_seconds": statistics.median(timed),
        "resident_end_gib": resident[-1],
        "resident_max_gib": max(resident),
        "minor_faults": faults[-1] - faults[WARM_UP_STEPS - 1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60, help="steps a configuration (the first 3 left out)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds, the configurations taking turns")
    parser.add_argument("--configurations", nargs="+", default=list(CONFIGURATIONS), choices=CONFIGURATIONS)
    parser.add_argument("--child", choices=CONFIGURATIONS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps <= WARM_UP_STEPS:
        parser.error(f"--steps must be more than the {WARM_UP_STEPS} warm-up steps")
    if args.child:
        print(json.dumps(child(args.child, args.steps)))
        return
    require_litbank()
    print(f"host: {host()}")
    results: dict[str, list[dict[str, object]]] = {name: [] for name in args.configurations}
    for round_number in range(1, args.rounds + 1):
        for name in args.configurations:
            environment = {**os.environ, **CACHES.get(name, {})}
            done = subprocess.run(
                [sys.executable, __file__, "--child", name, "--steps", str(args.steps)],
                capture_output=True,
                text=True,
                env=environment,
                cwd=ROOT,
            )
            if done.returncode != 0:
                sys.exit(f"{name} failed: {(done.stderr.strip().splitlines() or ['(no message)'])[-1]}")
            measured = json.loads(done.stdout.strip().splitlines()[-1])
            results[name].append(measured)
            if name != "mkl" and not measured["routed"]:
                print(f"{name}: this CPU takes torch's own path (below AVX-512): the same as mkl")
            print(
                f"round {round_number}, {name}: {measured['mean_seconds']:.3f} s a step "
                f"(median {measured['median_seconds']:.3f}), resident {measured['resident_end_gib']:.2f} GiB at the "
                f"end (highest {measured['resident_max_gib']:.2f}), {measured['minor_faults']:,} minor faults"
            )
    write_results({"steps": args.steps, "results": results}, ROOT / "data/benchmarks/onednn_products.json")


if __name__ == "__main__":
    main()
