"""Peak memory of one training step of each preset, with and without gradient checkpointing.

Run: python benchmarks/memory/preset_memory.py [--presets cpu_minilm,spanbert_base,spanbert_large]

Each preset's architecture is built with random weights (BERT-base: 12 layers of 768;
BERT-large and SpanBERT-large: 24 layers of 1024; the packaged MiniLM as it is), so
nothing is downloaded. One training step in fp32 on the CPU: a document of the preset's
``max_training_sentences`` full segments of ``max_segment_len`` subtokens, forward,
backward and the AdamW / Adam step. Each configuration runs in a fresh process; the
figure is that process's peak resident memory minus its memory before the model was
built (weights, gradients, optimiser state, activations). A GPU needs about this plus
its CUDA context; mixed precision lowers the activations' share.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import json
import resource
import subprocess
import time

from benchmarks.common import ROOT

ARCHITECTURES = {  # hidden size, layers, heads, vocabulary (the cased BERT vocabulary SpanBERT shares)
    "bert-base-cased": (768, 12, 12, 28996),
    "SpanBERT/spanbert-base-cased": (768, 12, 12, 28996),
    "bert-large-cased": (1024, 24, 16, 28996),
    "SpanBERT/spanbert-large-cased": (1024, 24, 16, 28996),
}


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class RandomIds:
    """Token ids for a random document (what ``tensorize`` asks a tokenizer)."""

    def __init__(self, vocabulary: int) -> None:
        import random

        self.random = random.Random(0)
        self.vocabulary = vocabulary

    def convert_tokens_to_ids(self, tokens):
        return [self.random.randrange(1000, self.vocabulary) for _ in tokens]


def one_step(preset: str, checkpointing: bool) -> dict[str, float]:
    """One training step of ``preset`` in this process: the memory it added and its time."""
    import torch
    from transformers import BertConfig

    from benchmarks.common import preset_settings
    from coref_pipeline.models.baseline import BaselineCorefModel
    from coref_pipeline.models.config import resolve_head, resolve_mention_loss
    from coref_pipeline.models.document import tensorize
    from coref_pipeline.models.encoder import SegmentEncoder
    from coref_pipeline.pretrained import resolve_pretrained
    from coref_pipeline.training.engine import Engine
    from coref_pipeline.training.loop import training_step
    from coref_pipeline.training.optim import model_optimisers

    config, training = preset_settings(preset, {"device": "cpu"})
    config = resolve_mention_loss(config, annotates_singletons=False)  # the random document annotates none
    config = resolve_head(config, fp32_cpu=False)  # cpu_minilm's full head (in fp32 on a CPU it takes a smaller one)
    before = peak_mb()
    if config.encoder in ARCHITECTURES:
        hidden, layers, heads, vocabulary = ARCHITECTURES[config.encoder]
        encoder = SegmentEncoder.from_config(
            BertConfig(
                vocab_size=vocabulary,
                hidden_size=hidden,
                num_hidden_layers=layers,
                num_attention_heads=heads,
                intermediate_size=4 * hidden,
                max_position_embeddings=512,
            )
        )
    else:
        encoder = SegmentEncoder.from_pretrained(resolve_pretrained(config.encoder))
        vocabulary = encoder.model.config.vocab_size
    if checkpointing:
        encoder.enable_gradient_checkpointing()
    model = BaselineCorefModel(config, encoder)
    segments = config.max_training_sentences
    length = config.max_segment_len
    sentence = 25  # subtokens per sentence
    body = length - 2
    document = {
        "doc_key": "nw/random_0",
        "sentences": [["[CLS]"] + ["x"] * body + ["[SEP]"] for _ in range(segments)],
        "speakers": [["[SPL]"] + ["a"] * body + ["[SPL]"] for _ in range(segments)],
        "clusters": [[[1, 2], [40, 41], [300, 301]], [[10, 10], [200, 200]]],
        "sentence_map": [
            index // sentence + s * (body // sentence + 2) for s in range(segments) for index in range(length)
        ],
        "subtoken_map": [s * length + index for s in range(segments) for index in range(length)],
    }
    tensors = tensorize(document, RandomIds(vocabulary), length, config.genres, config.default_genre, 20)
    optimisers = model_optimisers(model, training, total_steps=10)
    engine = Engine(training)
    model.train()
    started = time.perf_counter()
    training_step(model.training_losses, tensors, optimisers, training.gradient_clip, engine)
    seconds = time.perf_counter() - started
    parameters = sum(p.numel() for p in model.encoder.parameters())
    return {
        "preset": preset,
        "checkpointing": checkpointing,
        "encoder_parameters_m": parameters / 1e6,
        "subtokens": segments * length,
        "step_memory_gb": (peak_mb() - before) / 1024,
        "step_seconds": seconds,
        "torch": torch.__version__,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", default="cpu_minilm,spanbert_base,spanbert_large")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # PRESET:0|1, in a fresh process
    args = parser.parse_args()
    if args.one:
        preset, checkpointing = args.one.split(":")
        print(json.dumps(one_step(preset, checkpointing == "1")))
        return
    rows = []
    for preset in args.presets.split(","):
        for checkpointing in ("0", "1"):
            finished = subprocess.run(
                [sys.executable, __file__, "--one", f"{preset}:{checkpointing}"],
                capture_output=True,
                text=True,
                check=True,
                env={"HF_HUB_OFFLINE": "1", **__import__("os").environ},
            )
            rows.append(json.loads(finished.stdout.strip().splitlines()[-1]))
            row = rows[-1]
            print(
                f"{row['preset']:>15} checkpointing={'on ' if row['checkpointing'] else 'off'} "
                f"encoder {row['encoder_parameters_m']:.0f}M, {row['subtokens']} subtokens: "
                f"{row['step_memory_gb']:.2f} GB, {row['step_seconds']:.1f} s",
                flush=True,
            )
    out = ROOT / "data" / "benchmarks" / "preset_memory.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
