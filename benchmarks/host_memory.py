"""Speed and resident memory of training with and without the kept heap (devices.keep_host_memory).

Run: python benchmarks/host_memory.py [--steps 60] [--eval-every 10]

Two processes, one with ``COREF_PIPELINE_KEEP_HOST_MEMORY`` unset (the default: kept on a
machine with 16 GiB or more, within its bound) and one with it at ``0``. Each trains the
``cpu_minilm`` preset as it is (``precision: auto``, word-boundary spans) on the shared
LitBank train documents for ``--steps`` steps, with a dev prediction of 4 full documents
every ``--eval-every`` steps (whose blocks have other sizes than a step's), and prints
seconds per step (after 3 warm-up steps), the resident memory every 5 steps and the peak.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(steps: int, eval_every: int) -> dict[str, object]:
    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    from baseline import cpu_minilm_settings, segmented_litbank, timed_training_steps

    from coref_pipeline.runtime import devices

    model_config, training = cpu_minilm_settings({})
    corpus = segmented_litbank(model_config.tokenizer_name, model_config.max_segment_len)
    dev_documents = corpus.documents("dev", model_config.max_segment_len)[:4]
    dev_tensors, resident = [], []

    def after_step(step: int, trained) -> None:
        if step % eval_every == 0:
            dev_tensors[:] = dev_tensors or [trained.tensorize(document) for document in dev_documents]
            trained.model.eval()
            with torch.no_grad():
                for tensors in dev_tensors:
                    trained.model(tensors)
            trained.model.train()
        if step % 5 == 0:
            resident.append(devices.resident_bytes() // 2**20)

    measured = timed_training_steps(corpus, model_config, training, steps, after_step)[3:]  # after warm-up
    return {
        "precision": devices.resolve_precision(training.precision, torch.device("cpu")),
        "kept": devices.keep_host_memory(),  # already set by build_baseline; says whether it is
        "seconds_per_step": sum(measured) / len(measured),
        "resident_mb_every_5_steps": resident,
        "peak_resident_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.steps, args.eval_every)))
        return
    for setting in (None, "0"):
        env = dict(os.environ)
        env.pop("COREF_PIPELINE_KEEP_HOST_MEMORY", None)
        if setting is not None:
            env["COREF_PIPELINE_KEEP_HOST_MEMORY"] = setting
        command = [
            sys.executable,
            __file__,
            "--child",
            "--steps",
            str(args.steps),
            "--eval-every",
            str(args.eval_every),
        ]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        name = "unset (default)" if setting is None else setting
        print(
            f"COREF_PIPELINE_KEEP_HOST_MEMORY={name}: kept {result['kept']}, {result['precision']}, "
            f"{result['seconds_per_step']:.3f} s/step, "
            f"resident MB every 5 steps {result['resident_mb_every_5_steps']}, peak {result['peak_resident_mb']} MB",
            flush=True,
        )


if __name__ == "__main__":
    main()
