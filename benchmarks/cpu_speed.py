"""Training-step and prediction speed on this CPU, with and without keeping freed host memory.

Run: python benchmarks/cpu_speed.py [--steps 12] [--precision auto] [--rounds 2]

Each measurement runs in its own process, once with the allocator setting of
``coref_pipeline.runtime.devices.keep_host_memory`` (the default) and once with
``COREF_PIPELINE_KEEP_HOST_MEMORY=0``, alternating, ``--rounds`` times; the ratio of
the medians is printed. Two measurements, both on the shared LitBank split with the
packaged MiniLM (weights as pretrained: the cost of a step or a prediction does not
depend on the trained values, only on the sizes):

* ``train``: seconds per training step at the peer configuration (3 segments of 384,
  ffnn 1000, 50 antecedents, all spans), as ``benchmarks/baseline.py`` measures it;
* ``predict``: the 10 test documents' full prediction time against the encoder's
  own forward time on the same documents (``word_boundary_spans``, as the LitBank
  benchmark model), at ``--precision`` (``auto``, the default: as a run decides it on this
  CPU), for each ``--antecedents`` count.

Figures go to stdout and ``data/benchmarks/cpu_speed.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "data" / "benchmarks" / "cpu_speed.json"


def child(kind: str, steps: int, precision: str, antecedents: int) -> dict[str, float]:
    """One measurement in this process (the parent sets the environment)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from baseline import cpu_minilm_settings, inference_ratio, segmented_litbank, throughput

    from coref_pipeline.models.config import FULL_HEAD
    from coref_pipeline.serving.coref_model import CorefModel
    from coref_pipeline.training import build_baseline
    from coref_pipeline.training.loop import decide_for_corpus

    overrides = {**FULL_HEAD, "word_boundary_spans": True, "max_top_antecedents": antecedents}
    model_config, _ = cpu_minilm_settings(overrides)
    corpus = segmented_litbank(model_config.tokenizer_name, model_config.max_segment_len)
    if kind == "train":
        return throughput(corpus, steps, precision)
    built = build_baseline(decide_for_corpus(model_config, corpus))
    model = CorefModel(built.model_type, built.model, built.tokenizer, precision=precision)
    return inference_ratio(model, corpus.documents("test", model_config.max_segment_len))


def measure(kind: str, keep: bool, args: argparse.Namespace, antecedents: int) -> dict[str, float]:
    env = {**os.environ, "COREF_PIPELINE_KEEP_HOST_MEMORY": "1" if keep else "0"}
    command = [sys.executable, __file__, "--child", kind, "--steps", str(args.steps), "--precision", args.precision]
    command += ["--antecedents", str(antecedents)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=12, help="training steps timed (after 3 warm-up steps)")
    parser.add_argument("--precision", default="auto", choices=["auto", "32", "bf16-mixed"])
    parser.add_argument("--antecedents", default="50", help="max_top_antecedents for predict (comma-separated)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", choices=["train", "predict"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps, args.precision, int(args.antecedents))))
        return
    if not (ROOT.parent / "shared" / "corpora" / "litbank" / "train.conll").is_file():
        sys.exit("shared LitBank corpus not found at ../shared/corpora/litbank")

    import torch

    from coref_pipeline.runtime.devices import resolve_precision

    precision = resolve_precision(args.precision, torch.device("cpu"))
    results: dict[str, object] = {"precision": precision}
    jobs = [("train", 50)] + [("predict", int(c)) for c in args.antecedents.split(",")]
    for kind, antecedents in jobs:
        name = kind if kind == "train" else f"predict, {antecedents} antecedents"
        runs: dict[str, list[dict[str, float]]] = {"kept": [], "default": []}
        for _ in range(args.rounds):
            for keep in (True, False):
                runs["kept" if keep else "default"].append(measure(kind, keep, args, antecedents))
        figure = "seconds_per_document" if kind == "train" else "predict_seconds"
        medians = {setting: statistics.median(run[figure] for run in values) for setting, values in runs.items()}
        results[name] = {"runs": runs, "median_" + figure: medians, "speed_up": medians["default"] / medians["kept"]}
        line = f"{name} ({precision}): {figure} {medians['kept']:.3f} kept vs {medians['default']:.3f} default"
        line += f" = {medians['default'] / medians['kept']:.2f}x"
        if kind == "predict":
            ratios = {s: statistics.median(run["ratio"] for run in values) for s, values in runs.items()}
            results[name]["median_ratio"] = ratios
            line += f"; inference / encoder {ratios['kept']:.2f}x kept, {ratios['default']:.2f}x default"
        else:
            line += f"; {1 / medians['kept']:.3f} documents/s kept"
        print(line, flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
