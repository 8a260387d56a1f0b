"""The baseline on the shared LitBank split with the packaged MiniLM: accuracy, speed, memory.

Run: python benchmarks/baseline.py [--minutes 60] [--throughput-steps 30] [--skip-training]

1. Segments LitBank fold 0 (../shared/corpora/litbank) at max_segment_len 384.
2. Trains the ``cpu_minilm`` preset (plus ``--set key=value`` overrides) on train,
   evaluating on dev every epoch and keeping the best (singletons removed from the
   gold, OntoNotes-style), within a training-time budget of ``--minutes``.
3. Scores the best model on test; prints CoNLL F1, training minutes, documents/s,
   the dev learning curve and the peak resident memory.
4. Inference cost: full prediction time vs the encoder's own forward time on the
   test documents.
5. Throughput at the peer configuration (seg 384, 3 training segments, ffnn 1000,
   coref_depth 1, lr 2e-5/2e-4, all spans): documents/s over ``--throughput-steps``.

Figures go to stdout and to ``data/benchmarks/baseline_litbank/results.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import sys
import time
from pathlib import Path

import torch
import yaml

from coref_pipeline.datasets import ConllFileDataset
from coref_pipeline.encoders import resolve_encoder
from coref_pipeline.models.document import random_crop
from coref_pipeline.pipelines.coref_train.nodes import build_baseline, fit_baseline, resolve_settings
from coref_pipeline.pipelines.preprocess.nodes import preprocess_conll
from coref_pipeline.pipelines.segment.nodes import segment_frame
from coref_pipeline.predict import CorefModel, score_predictions
from coref_pipeline.segmentation import load_tokenizer
from coref_pipeline.training import build_optimisers, seed_everything

ROOT = Path(__file__).resolve().parents[1]
LITBANK = ROOT.parent / "shared" / "corpora" / "litbank"
WORK = ROOT / "data" / "benchmarks" / "baseline_litbank"
PREPROCESS = {"min_columns": 12, "skip_bad_documents": False, "genres": ["bc"], "default_genre": "nw"}


def segmented_litbank(tokenizer_name: str, length: int) -> dict[str, list[dict]]:
    tokenizer = load_tokenizer(resolve_encoder(tokenizer_name))
    splits = {}
    for split in ("train", "dev", "test"):
        frame = preprocess_conll(ConllFileDataset(str(LITBANK / f"{split}.conll")).load(), PREPROCESS)
        splits[split] = segment_frame(frame, tokenizer, [length], include_tokens=True, description=split)[length]
    return splits


def parse_overrides(pairs: list[str]) -> dict[str, object]:
    return {key: yaml.safe_load(value) for key, value in (pair.split("=", 1) for pair in pairs)}


def peak_memory_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def inference_ratio(trained: CorefModel, documents: list[dict]) -> dict[str, float]:
    """Seconds of full prediction vs the encoder alone on the same documents (best of 2)."""
    tensors = [trained.tensorize(document) for document in documents]
    trained.model.eval()

    def encoder_only() -> None:
        with torch.no_grad():
            for document in tensors:
                trained.model.encoder(document.input_ids, document.attention_mask)

    def full() -> None:
        for document in tensors:
            trained.predict_tensors(document)

    timings = {}
    for name, run in (("encoder_seconds", encoder_only), ("predict_seconds", full)):
        best = float("inf")
        for _ in range(2):
            started = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - started)
        timings[name] = best
    timings["ratio"] = timings["predict_seconds"] / timings["encoder_seconds"]
    return timings


def throughput(splits: dict[str, list[dict]], steps: int) -> dict[str, float]:
    """Training documents/s at the peer configuration (the cpu_minilm preset, all spans)."""
    params = yaml.safe_load((ROOT / "conf/base/parameters_coref_train.yml").read_text())["coref_train"]
    params = {**params, "preset": "cpu_minilm", "overrides": {"word_boundary_spans": False, "coref_depth": 1}}
    model_config, training = resolve_settings(params)
    seed_everything(training.seed)
    model, tokenizer = build_baseline(model_config)
    trained = CorefModel("baseline", model, tokenizer)
    tensors = [trained.tensorize(document) for document in splits["train"][: steps + 3]]
    task = [p for module in model.task_modules() for p in module.parameters()]
    optimisers = build_optimisers(model.encoder, task, training, 10_000)
    generator = torch.Generator().manual_seed(0)
    model.train()
    timings = []
    for document in tensors:
        started = time.perf_counter()
        loss = model(random_crop(document, model_config.max_training_sentences, generator)).loss
        loss.backward()
        optimisers.step(training.gradient_clip)
        timings.append(time.perf_counter() - started)
    measured = timings[3:]  # the first steps warm up
    return {"steps": len(measured), "seconds_per_document": sum(measured) / len(measured)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="training-time budget")
    parser.add_argument("--epochs", type=int, default=10, help="sets the schedule: match it to the budget")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="preset override")
    parser.add_argument("--throughput-steps", type=int, default=30)
    parser.add_argument("--skip-training", action="store_true", help="reuse the trained model in the work folder")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not (LITBANK / "train.conll").is_file():
        sys.exit(f"shared LitBank corpus not found at {LITBANK}")
    WORK.mkdir(parents=True, exist_ok=True)

    params = yaml.safe_load((ROOT / "conf/base/parameters_coref_train.yml").read_text())["coref_train"]
    overrides = {"num_epochs": args.epochs, "eval_frequency": 80, "checkpoint_frequency": 80}
    overrides.update({"time_budget_minutes": args.minutes, "remove_singletons": True})
    overrides.update(parse_overrides(args.set))
    params = {**params, "preset": "cpu_minilm", "overrides": overrides}
    model_config, training = resolve_settings(params)
    splits = segmented_litbank(model_config.tokenizer or model_config.encoder, model_config.max_segment_len)
    results: dict[str, object] = {"model": model_config.to_dict(), "training": training.to_dict()}

    if not args.skip_training:
        seed_everything(training.seed)
        model, tokenizer = build_baseline(model_config)
        started = time.perf_counter()
        log_params = {"preset": "cpu_minilm", **model_config.to_dict(), **training.to_dict()}
        trained = fit_baseline(model, tokenizer, splits["train"], splits["dev"], training, WORK / "run", log_params)
        results["wall_minutes"] = (time.perf_counter() - started) / 60
    trained = CorefModel.load(WORK / "run" / "best")
    state = json.loads((sorted((WORK / "run" / "checkpoints").glob("step-*"))[-1] / "state.json").read_text())
    train_state = state["train_state"]
    results["training_minutes"] = train_state["train_seconds"] / 60
    results["steps"] = train_state["global_step"]
    results["train_documents_per_second"] = train_state["global_step"] / train_state["train_seconds"]
    results["best_dev_conll_f1"] = train_state["best_f1"]
    results["best_step"] = train_state["best_step"]
    curve_file = WORK / "run" / "dvclive" / "plots" / "metrics" / "dev" / "conll_f1.tsv"
    if curve_file.is_file():
        rows = [line.split("\t") for line in curve_file.read_text().splitlines()[1:]]
        results["dev_curve"] = [[int(step), round(float(value), 2)] for step, value in rows]

    predictions = trained.predict_documents(splits["test"], total=len(splits["test"]))
    test_scores = score_predictions(predictions, remove_singletons=True)
    results["test"] = {
        "conll_f1": 100 * test_scores.conll_f1,
        **{f"{m}_f1": 100 * test_scores[m].f1 for m in ("muc", "bcub", "ceafe")},
    }
    results["inference"] = inference_ratio(trained, splits["test"])
    results["throughput_peer_config"] = throughput(splits, args.throughput_steps)
    results["peak_rss_mb"] = peak_memory_mb()
    (WORK / "results.json").write_text(json.dumps(results, indent=2) + "\n")

    print(
        f"test CoNLL F1 {results['test']['conll_f1']:.2f} (best dev {results['best_dev_conll_f1']:.2f} at step "
        f"{results['best_step']} of {results['steps']})"
    )
    print(f"training {results['training_minutes']:.1f} min, {results['train_documents_per_second']:.3f} documents/s")
    peer = results["throughput_peer_config"]
    print(
        f"peer configuration: {peer['seconds_per_document']:.2f} s/document "
        f"({1 / peer['seconds_per_document']:.3f} documents/s) over {peer['steps']} steps"
    )
    inference = results["inference"]
    print(
        f"inference {inference['predict_seconds']:.2f} s vs encoder {inference['encoder_seconds']:.2f} s "
        f"= {inference['ratio']:.2f}x on {len(splits['test'])} test documents"
    )
    print(f"peak resident memory {results['peak_rss_mb']:.0f} MB")
    print("dev curve (step, CoNLL F1):", results.get("dev_curve"))


if __name__ == "__main__":
    main()
