"""The heap kept for reuse (``devices.keep_host_memory``) against the C allocator as it is: speed and resident memory.

Run: python benchmarks/memory/host_memory.py [--parts train,predict,resident] [--rounds 2] [--steps 12]
         [--precision auto] [--antecedents 50] [--resident-steps 60] [--eval-every 10]

Every measurement runs in a process of its own, once with ``COREF_PIPELINE_KEEP_HOST_MEMORY`` unset (the default:
kept on a machine with 16 GiB or more, within its bound) and once with it at ``0``, the two alternating,
``--rounds`` times; the ratio of the medians is printed. On the shared LitBank split with the packaged MiniLM
(weights as pretrained: a step's or a prediction's cost depends on the sizes, not on the trained values):

* ``train``: seconds per training step at the peer configuration (3 segments of 384, ffnn 1000, 50 antecedents,
  all spans), ``--steps`` steps after 3 warm-up steps, at ``--precision``;
* ``predict``: the 10 test documents' full prediction time against the encoder's own forward time
  (``word_boundary_spans``), at ``--precision``, for each ``--antecedents`` count;
* ``resident``: the ``cpu_minilm`` preset as it is for ``--resident-steps`` steps, with a dev prediction of 4 full
  documents every ``--eval-every`` steps (blocks of other sizes than a step's): seconds per step, the resident
  memory every 5 steps and the peak.

Figures go to stdout and ``data/benchmarks/host_memory.json``.
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

from benchmarks.common import RESULTS, host, require_litbank, write_results

VARIABLE = "COREF_PIPELINE_KEEP_HOST_MEMORY"
SETTINGS = {"kept": None, "default": "0"}  # the variable unset (the project's default) or 0 (the allocator as it is)


def child(part: str, args: argparse.Namespace, antecedents: int) -> dict[str, object]:
    """One measurement in this process (the parent sets the variable)."""
    import torch

    from benchmarks.common import (
        cpu_minilm_settings,
        inference_ratio,
        segmented_litbank,
        throughput,
        timed_training_steps,
    )
    from coref_pipeline.models.config import FULL_HEAD
    from coref_pipeline.runtime import devices
    from coref_pipeline.serving.coref_model import CorefModel
    from coref_pipeline.training import build_baseline
    from coref_pipeline.training.loop import decide_for_corpus

    if part == "resident":
        model_config, training = cpu_minilm_settings({})
    else:
        overrides = {**FULL_HEAD, "word_boundary_spans": True, "max_top_antecedents": antecedents}
        model_config, training = cpu_minilm_settings(overrides)
    corpus = segmented_litbank(model_config.tokenizer_name, model_config.max_segment_len)
    if part == "train":
        return throughput(corpus, args.steps, args.precision)
    if part == "predict":
        built = build_baseline(decide_for_corpus(model_config, corpus))
        model = CorefModel(built.model_type, built.model, built.tokenizer, precision=args.precision)
        return inference_ratio(model, corpus.documents("test", model_config.max_segment_len))
    dev_documents = corpus.documents("dev", model_config.max_segment_len)[:4]
    dev_tensors, resident = [], []

    def after_step(step: int, trained) -> None:
        if step % args.eval_every == 0:
            dev_tensors[:] = dev_tensors or [trained.tensorize(document) for document in dev_documents]
            trained.model.eval()
            with torch.no_grad():
                for tensors in dev_tensors:
                    trained.model(tensors)
            trained.model.train()
        if step % 5 == 0:
            resident.append(devices.resident_bytes() // 2**20)

    measured = timed_training_steps(corpus, model_config, training, args.resident_steps, after_step)[3:]
    return {
        "precision": devices.resolve_precision(training.precision, torch.device("cpu")),
        "kept": devices.keep_host_memory(),  # already set when the model was built; says whether it is
        "seconds_per_step": sum(measured) / len(measured),
        "resident_mb_every_5_steps": resident,
        "peak_resident_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }


def measure(part: str, setting: str | None, args: argparse.Namespace, antecedents: int) -> dict[str, object]:
    env = {key: value for key, value in os.environ.items() if key != VARIABLE}
    if setting is not None:
        env[VARIABLE] = setting
    command = [sys.executable, __file__, "--child", part, "--antecedents", str(antecedents)]
    command += ["--steps", str(args.steps), "--precision", args.precision]
    command += ["--resident-steps", str(args.resident_steps), "--eval-every", str(args.eval_every)]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the {part} measurement failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default="train,predict,resident", help="comma-separated: train, predict, resident")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of the two settings")
    parser.add_argument("--steps", type=int, default=12, help="train: steps timed (after 3 warm-up steps)")
    parser.add_argument("--precision", default="auto", choices=["auto", "32", "bf16-mixed"])
    parser.add_argument("--antecedents", default="50", help="predict: max_top_antecedents (comma-separated)")
    parser.add_argument("--resident-steps", type=int, default=60, help="resident: steps of the cpu_minilm preset")
    parser.add_argument("--eval-every", type=int, default=10, help="resident: steps between dev predictions")
    parser.add_argument("--child", choices=["train", "predict", "resident"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args, int(args.antecedents.split(",")[0]))))
        return
    require_litbank()
    parts = args.parts.split(",")
    jobs = [(part, 50) for part in parts if part != "predict"]
    jobs += [("predict", int(count)) for count in args.antecedents.split(",") if "predict" in parts]
    results: dict[str, object] = {}
    print(f"host: {host()}", flush=True)
    for part, antecedents in jobs:
        name = part if part != "predict" else f"predict, {antecedents} antecedents"
        runs: dict[str, list[dict]] = {setting: [] for setting in SETTINGS}
        for _ in range(args.rounds):
            for setting, value in SETTINGS.items():
                runs[setting].append(measure(part, value, args, antecedents))
        figure = {"train": "seconds_per_document", "predict": "predict_seconds", "resident": "seconds_per_step"}[part]
        medians = {setting: statistics.median(run[figure] for run in values) for setting, values in runs.items()}
        results[name] = {"runs": runs, f"median_{figure}": medians, "speed_up": medians["default"] / medians["kept"]}
        line = f"{name}: {figure} {medians['kept']:.3f} kept vs {medians['default']:.3f} default"
        line += f" = {medians['default'] / medians['kept']:.2f}x"
        if part == "predict":
            ratios = {s: statistics.median(run["ratio"] for run in values) for s, values in runs.items()}
            results[name]["median_ratio"] = ratios
            line += f"; inference / encoder {ratios['kept']:.2f}x kept, {ratios['default']:.2f}x default"
        elif part == "train":
            line += f"; {1 / medians['kept']:.3f} documents/s kept ({runs['kept'][0]['precision']})"
        else:
            peaks = {s: max(run["peak_resident_mb"] for run in values) for s, values in runs.items()}
            results[name]["peak_resident_mb"] = peaks
            line += f"; peak resident {peaks['kept']} MB kept, {peaks['default']} MB default"
            line += f"; every 5 steps (kept, first round): {runs['kept'][0]['resident_mb_every_5_steps']}"
        print(line, flush=True)
    write_results(results, RESULTS / "host_memory.json")


if __name__ == "__main__":
    main()
