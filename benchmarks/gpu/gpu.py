"""The published base preset on a GPU: training steps of ``spanbert_base`` in fp32 and bf16-mixed, a run, ``predict``.

Run: python benchmarks/gpu/gpu.py [--steps 30] [--encoder-files DIR] [--work-dir DIR] [--device cuda]
         [--encoder-shape bert-base|minilm]

Made to be run once on a machine with a GPU and no network, in a few minutes:

1. Encoders. ``spanbert_base``'s encoder is BERT-base shaped (768 hidden, 12 layers, 12 heads, 3072
   intermediate); without a network its weights cannot be had, so the program builds that shape with
   random weights (seeded) and the packaged MiniLM's tokenizer, and the MiniLM's own shape (6 layers, 384)
   for the peer configuration. ``--encoder-shape minilm`` gives ``spanbert_base`` the MiniLM's shape too: the
   shape of the main job's models, whose runs' prediction ``benchmarks/prediction/batched.py`` can then time.
   A step's time depends on the shapes, not on the weights' values; the vocabulary (30,522 here, 28,996
   SpanBERT's) changes only the embedding's size. ``--encoder-files`` names a folder holding the MiniLM's
   ``config.json`` and tokenizer files (default: the packaged MiniLM).
2. LitBank fold 0 (../shared/corpora/litbank) segmented at 384 with that tokenizer.
3. Training steps, one document each, the first three left out (they warm up): ``spanbert_base`` in fp32
   and in bf16-mixed, and the peer configuration (the MiniLM at the CPU benchmarks' peer settings) in fp32,
   the reference speed of the host. Documents/s and the GPU's peak allocated memory of each. Beside them,
   bf16-mixed with cuDNN's attention kernel allowed: the measured reason the encoder leaves it out.
4. Two processes (DDP over NCCL, started by Lightning Fabric) where the machine has two GPUs or more: the
   same steps with ``devices: 2``; else said to be skipped.
5. A run through ``train_baseline`` (what ``kedro run --pipelines=coref_train`` calls) of ``spanbert_base``
   at ``precision: auto`` for ``--run-steps`` steps with a dev evaluation at its end, then
   ``coref-pipeline predict`` on LitBank test (a new process, ``--precision auto``), timed whole.
6. The incremental model initialised from that run's best model, trained through ``train_incremental``
   (what ``kedro run --pipelines=incremental_train`` calls; the committed preset, ``precision: auto``) for
   ``--run-steps`` steps with a dev evaluation, then ``coref-pipeline predict`` with it on LitBank test.
7. SpanBERT's objective (the ``pretrain`` pipeline's ``spanbert`` preset: span masking and the span boundary
   objective) continuing the BERT-base-shaped encoder for ``--steps`` batches through ``pretrain_encoder``
   in fp32 and in bf16-mixed: segments/s (its held-out evaluation and the encoder's save left out) and peak
   GPU memory.

Figures go to stdout and to ``WORK_DIR/results.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import contextlib
import gc
import json
import logging
import shutil
import statistics
import time

import torch

from benchmarks.common import (
    LITBANK,
    PEER_CONFIGURATION,
    ROOT,
    WARM_UP_STEPS,
    coref_pipeline,
    host,
    incremental_preset,
    preset_settings,
    segmented_litbank,
    test_f1,
    timed_training_steps,
)
from coref_pipeline.formats.corpus import SegmentedCorpus
from coref_pipeline.models import encoder
from coref_pipeline.pretraining.run import pretrain_encoder, pretrain_settings
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.training import Run, train_baseline
from coref_pipeline.training.incremental import incremental_settings, train_incremental

WORK = ROOT / "data" / "benchmarks" / "gpu"
TOKENIZER_FILES = ("special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt")
BERT_BASE_SHAPE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072}
# --encoder-shape: the spanbert_base preset's encoder at its own shape, or at the MiniLM's (the main job's models)
ENCODER_SHAPES = {"bert-base": BERT_BASE_SHAPE, "minilm": {}}


def shaped_encoder(files: Path, out: Path, shape: dict[str, int]) -> Path:
    """A BERT encoder directory with ``files``' tokenizer, its configuration changed by ``shape``, random weights."""
    from transformers import BertConfig, BertModel

    config = BertConfig.from_pretrained(files)
    for key, value in shape.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    model = BertModel(config, add_pooling_layer=False)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        shutil.copy(files / name, out / name)
    return out


def gpu_memory_gib(device: torch.device) -> float:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")


def timed_row(
    corpus: SegmentedCorpus, preset: str, overrides: dict, steps: int, device: str, cudnn_attention: bool = False
) -> dict[str, float]:
    """Documents/s and peak GPU memory of ``steps`` training steps of ``preset`` with ``overrides``; with
    ``cudnn_attention``, the encoder's attention may take cuDNN's kernel (which the library leaves out)."""
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model_config, training = preset_settings(preset, overrides)
    without_cudnn = encoder.attention_without_cudnn
    if cudnn_attention:
        encoder.attention_without_cudnn = contextlib.nullcontext
    try:
        measured = timed_training_steps(corpus, model_config, training, steps + WARM_UP_STEPS, device=device)[
            WARM_UP_STEPS:
        ]
    finally:
        encoder.attention_without_cudnn = without_cudnn
    return {
        "steps": len(measured),
        "documents_per_second": len(measured) / sum(measured),
        "median_step_seconds": statistics.median(measured),
        "slowest_step_seconds": max(measured),
        "peak_gpu_memory_gib": gpu_memory_gib(torch.device(device)),
    }


def pretraining_row(
    corpus: SegmentedCorpus, encoder_dir: Path, precision: str, steps: int, device: str, work: Path
) -> dict:
    """Segments/s and peak GPU memory of ``steps`` batches of SpanBERT's objective on ``encoder_dir``."""
    import yaml

    presets = yaml.safe_load((ROOT / "conf/base/parameters_pretrain.yml").read_text())["pretrain"]["presets"]
    config, training = pretrain_settings(
        presets,
        "spanbert",
        {
            "encoder": str(encoder_dir),
            "precision": precision,
            "device": device,
            "max_steps": steps,
            "eval_frequency": steps,
            "checkpoint_frequency": steps,
            "num_epochs": 100,
        },
    )
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    run = Run(work / f"pretrain_{precision}", remove_singletons=False, restart=True)
    pretrain_encoder(corpus, config, training, run, work / f"pretrained_{precision}")
    checkpoint = sorted((work / f"pretrain_{precision}" / "checkpoints").glob("step-*"))[-1]
    state = json.loads((checkpoint / "state.json").read_text())["train_state"]
    return {
        "steps": state["global_step"],
        "batch_segments": config.batch_segments,
        "train_seconds": state["train_seconds"],
        "segments_per_second": state["global_step"] * config.batch_segments / state["train_seconds"],
        "peak_gpu_memory_gib": gpu_memory_gib(torch.device(device)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="timed training steps a row")
    parser.add_argument("--run-steps", type=int, default=60, help="steps of the train_baseline run before predict")
    parser.add_argument("--encoder-files", type=Path, help="the MiniLM's config.json and tokenizer files")
    parser.add_argument("--work-dir", type=Path, default=WORK)
    parser.add_argument(
        "--encoder-shape",
        choices=sorted(ENCODER_SHAPES),
        default="bert-base",
        help="the spanbert_base rows' and runs' encoder: BERT-base's shape (the preset's) or the MiniLM's "
        "(the main job's)",
    )
    parser.add_argument("--device", default="cuda", help="cuda (cpu only to try the program)")
    parser.add_argument(
        "--no-curves",
        action="store_true",
        help="the runs without DVCLive's curves (for a machine without DVC's own dependencies, e.g. a bare GPU image)",
    )
    args = parser.parse_args()
    if args.no_curves:
        from coref_pipeline.pretraining import run as pretraining_run
        from coref_pipeline.training import loop

        for module in (loop, pretraining_run):
            module.DvcLiveCallback = lambda *_, **__: loop.TrainingCallback()  # a callback that does nothing
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not (LITBANK / "train.conll").is_file():
        sys.exit(f"shared LitBank corpus not found at {LITBANK}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("no CUDA device: this program measures a GPU (--device cpu only tries it)")
    if args.encoder_files is None:
        from coref_pipeline.pretrained import embedded_minilm_path

        args.encoder_files = Path(embedded_minilm_path())
    work = args.work_dir
    minilm = shaped_encoder(args.encoder_files, work / "encoders" / "minilm_shaped", {})
    base = shaped_encoder(
        args.encoder_files, work / "encoders" / "spanbert_base_shaped", ENCODER_SHAPES[args.encoder_shape]
    )
    corpus = segmented_litbank(str(minilm), 384)
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    results: dict = {
        "host": host(),
        "device": device_name,
        "gpus": torch.cuda.device_count(),
        "torch": torch.__version__,
        "encoders": "random weights of the named shapes (no network): steps' times, not scores",
        "encoder_shape": args.encoder_shape,
    }
    print(
        f"host {results['host']}; device {device_name}; torch {torch.__version__}; encoder shape {args.encoder_shape}"
    )

    rows = {
        "peer configuration, fp32": ("cpu_minilm", {**PEER_CONFIGURATION, "encoder": str(minilm), "precision": "32"}),
        "spanbert_base, fp32": ("spanbert_base", {"encoder": str(base), "tokenizer": str(base), "precision": "32"}),
        "spanbert_base, bf16-mixed": (
            "spanbert_base",
            {"encoder": str(base), "tokenizer": str(base), "precision": "bf16-mixed"},
        ),
    }
    results["training_steps"] = {}
    variants = {**rows, "spanbert_base, bf16-mixed, cuDNN attention allowed": rows["spanbert_base, bf16-mixed"]}
    for name, (preset, overrides) in variants.items():
        row = timed_row(corpus, preset, overrides, args.steps, args.device, cudnn_attention="cuDNN" in name)
        results["training_steps"][name] = row
        print(
            f"{name}: {row['documents_per_second']:.2f} documents/s over {row['steps']} steps (median step "
            f"{row['median_step_seconds']:.3f} s, slowest {row['slowest_step_seconds']:.3f} s), "
            f"peak GPU memory {row['peak_gpu_memory_gib']:.2f} GiB"
        )
    peer = results["training_steps"]["peer configuration, fp32"]["documents_per_second"]
    for row in results["training_steps"].values():
        row["ratio_to_peer"] = row["documents_per_second"] / peer
    fp32, bf16 = (results["training_steps"][f"spanbert_base, {p}"] for p in ("fp32", "bf16-mixed"))
    print(f"spanbert_base bf16-mixed / fp32: {bf16['documents_per_second'] / fp32['documents_per_second']:.2f}x")

    if torch.cuda.device_count() >= 2:
        preset, overrides = rows["spanbert_base, bf16-mixed"]
        model_config, training = preset_settings(preset, {**overrides, "devices": 2, "max_steps": args.steps})
        run = Run(work / "ddp", remove_singletons=True, restart=True)
        started = time.perf_counter()
        train_baseline(corpus, model_config, training, run)
        seconds = time.perf_counter() - started
        results["two_processes"] = {"steps": args.steps, "documents": 2 * args.steps, "seconds_with_start": seconds}
        print(f"two processes: {2 * args.steps} documents in {seconds:.1f} s (start and a dev evaluation included)")
    else:
        results["two_processes"] = "skipped: fewer than two GPUs"
        print("two processes: skipped (fewer than two GPUs)")

    # The runs through the pipelines' entry points: precision auto, a checkpoint and a dev evaluation at the end.
    run_settings = {
        "precision": "auto",
        "device": args.device,
        "max_steps": args.run_steps,
        "eval_frequency": args.run_steps,
        "checkpoint_frequency": args.run_steps,
        "report_frequency": 10,
        "eval_max_documents": 5,
    }
    preset, overrides = rows["spanbert_base, bf16-mixed"]
    model_config, training = preset_settings(preset, {**overrides, **run_settings})
    run = Run(work / "run", remove_singletons=True, restart=True)
    started = time.perf_counter()
    train_baseline(corpus, model_config, training, run)
    results["run"] = {"steps": args.run_steps, "seconds": time.perf_counter() - started}
    print(f"train_baseline: {args.run_steps} steps and a dev evaluation in {results['run']['seconds']:.1f} s")

    test = work / "test.jsonlines"
    coref_pipeline("minimize", "--tokenizer", str(minilm), "--seg-len", "384", str(LITBANK / "test.conll"), str(test))
    output = work / "predicted.jsonl"
    seconds = coref_pipeline(
        "predict", "--model", str(work / "run" / "best"), "--device", args.device, str(test), str(output)
    )
    documents = sum(1 for line in test.read_text().splitlines() if line.strip())
    results["predict"] = {"documents": documents, "seconds": seconds, "test_conll_f1": test_f1(output)}
    print(f"coref-pipeline predict: {documents} test documents in {seconds:.1f} s (whole command)")

    _, incremental_values = incremental_preset(None)
    config, training = incremental_settings(
        CorefModel.load(work / "run" / "best"), {**incremental_values, **run_settings}
    )
    started = time.perf_counter()
    train_incremental(
        CorefModel.load(work / "run" / "best"),
        corpus,
        config,
        training,
        Run(work / "incremental", remove_singletons=True, restart=True),
    )
    results["incremental_run"] = {"steps": args.run_steps, "seconds": time.perf_counter() - started}
    print(
        f"train_incremental: {args.run_steps} steps and a dev evaluation in "
        f"{results['incremental_run']['seconds']:.1f} s"
    )
    output = work / "predicted_incremental.jsonl"
    seconds = coref_pipeline(
        "predict", "--model", str(work / "incremental" / "best"), "--device", args.device, str(test), str(output)
    )
    results["predict_incremental"] = {"documents": documents, "seconds": seconds, "test_conll_f1": test_f1(output)}
    print(f"coref-pipeline predict (incremental): {documents} test documents in {seconds:.1f} s (whole command)")

    results["pretraining"] = {}
    for precision in ("32", "bf16-mixed"):
        results["pretraining"][precision] = pretraining_row(corpus, base, precision, args.steps, args.device, work)
        row = results["pretraining"][precision]
        print(
            f"pretrain (span masking + SBO), {precision}: {row['segments_per_second']:.2f} segments/s over "
            f"{row['steps']} batches of {row['batch_segments']}, peak GPU memory {row['peak_gpu_memory_gib']:.2f} GiB"
        )
    (work / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
