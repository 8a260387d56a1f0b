"""The baseline on the shared LitBank split with the packaged MiniLM: accuracy, speed, memory.

Run: python benchmarks/training/baseline.py [--minutes 60] [--throughput-steps 30] [--skip-training] [--work-dir DIR]

1. Segments LitBank fold 0 (../shared/corpora/litbank) at max_segment_len 384.
2. Trains the ``cpu_minilm`` preset (plus ``--set key=value`` overrides) on train,
   evaluating on dev every epoch and keeping the best (singletons removed from the
   gold, OntoNotes-style), within a training-time budget of ``--minutes``.
3. Scores the best model on test; prints CoNLL F1, training minutes, documents/s,
   the dev learning curve and the peak resident memory.
4. Inference cost: full prediction time vs the encoder's own forward time on the
   test documents, in fp32 and in the run's precision (``precision: auto``: bf16-mixed on a device
   that computes it natively, else fp32), the latter with each ``--inference-antecedents`` count
   (``max_top_antecedents`` at inference) and each ``--inference-min-coarse-scores`` floor (``min_coarse_score``,
   with the model's antecedents), with the test F1 of each; plotted to ``inference_tradeoff.png``.
5. Throughput at the peer configuration (seg 384, 3 training segments, ffnn 1000,
   coref_depth 1, 50 antecedents, lr 2e-5/2e-4, all spans) in the run's precision:
   documents/s over ``--throughput-steps``: the host's speed, the reference for every timed figure.

Figures go to stdout and to ``data/benchmarks/baseline_litbank/results.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import json
import logging
import time

import torch

from benchmarks.common import (
    LITBANK,
    ROOT,
    cpu_minilm_settings,
    inference_ratio,
    parse_overrides,
    peak_memory_mb,
    segmented_litbank,
    throughput,
)
from coref_pipeline.evaluation.predictions import score_predictions
from coref_pipeline.runtime.devices import resolve_precision
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.training import Run, train_baseline

WORK = ROOT / "data" / "benchmarks" / "baseline_litbank"


def plot_learning_curve(dvclive: Path, out: Path) -> None:
    """Dev CoNLL F1 by step beside the encoder's and the task's learning rates (DVCLive's curves)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def series(name: str) -> tuple[list[int], list[float]]:
        path = dvclive / "plots" / "metrics" / f"{name}.tsv"
        rows = [line.split("\t") for line in path.read_text().splitlines()[1:]] if path.is_file() else []
        return [int(row[0]) for row in rows], [float(row[1]) for row in rows]

    figure, (f1_axis, rate_axis) = plt.subplots(1, 2, figsize=(11, 4))
    f1_axis.plot(*series("dev/conll_f1"), marker="o")
    f1_axis.set(title="dev CoNLL F1", xlabel="step", ylabel="F1")
    for name, label in (("train/bert_learning_rate", "encoder"), ("train/task_learning_rate", "task")):
        rate_axis.plot(*series(name), label=label)
    rate_axis.set(title="learning rate (the schedule)", xlabel="step")
    rate_axis.legend()
    figure.tight_layout()
    figure.savefig(out, dpi=100)
    plt.close(figure)


def plot_inference_tradeoff(inference: dict[str, dict[str, float]], out: Path) -> None:
    """Test CoNLL F1 against inference time / encoder time, one point per precision and antecedent count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 4))
    for index, (name, point) in enumerate(inference.items()):
        axis.scatter(point["ratio"], point["test_conll_f1"])
        offset = (4, 4 if index % 2 == 0 else -12)  # neighbouring settings' labels above and below their points
        axis.annotate(
            name, (point["ratio"], point["test_conll_f1"]), fontsize=8, xytext=offset, textcoords="offset points"
        )
    axis.axvline(2.0, linestyle="--", color="grey", label="goal: 2x the encoder")
    axis.set(
        title="LitBank test: inference cost and F1", xlabel="inference time / encoder time", ylabel="test CoNLL F1"
    )
    axis.legend()
    figure.tight_layout()
    figure.savefig(out, dpi=100)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="training-time budget")
    parser.add_argument("--epochs", type=int, default=20, help="at most; the schedule is fitted to the budget")
    parser.add_argument("--seed", type=int, help="the run's seed (default: the preset's, 13)")
    parser.add_argument(
        "--no-singletons",
        action="store_true",
        help="LitBank with its one-mention clusters removed from train, dev and test (an OntoNotes-style corpus)",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="preset override")
    parser.add_argument("--throughput-steps", type=int, default=30)
    parser.add_argument("--skip-training", action="store_true", help="reuse the trained model in the work folder")
    parser.add_argument("--work-dir", type=Path, default=WORK, help="where the run and results.json go")
    parser.add_argument("--skip-inference", action="store_true", help="no inference timing")
    parser.add_argument(
        "--inference-antecedents",
        default="50,30,20",
        help="inference in the run's precision is timed and scored with each of these max_top_antecedents",
    )
    parser.add_argument(
        "--inference-min-coarse-scores",
        default="",
        help="inference in the run's precision is also timed and scored with each of these min_coarse_score floors",
    )
    args = parser.parse_args()
    work = args.work_dir
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not (LITBANK / "train.conll").is_file():
        sys.exit(f"shared LitBank corpus not found at {LITBANK}")
    work.mkdir(parents=True, exist_ok=True)

    overrides = {"num_epochs": args.epochs, "eval_frequency": 80, "checkpoint_frequency": 80}
    overrides.update({"time_budget_minutes": args.minutes, "max_steps": None})  # the budget, not the main job's steps
    if args.seed is not None:
        overrides["seed"] = args.seed
    overrides.update(parse_overrides(args.set))
    model_config, training = cpu_minilm_settings(overrides)
    corpus = segmented_litbank(model_config.tokenizer_name, model_config.max_segment_len, not args.no_singletons)
    results: dict[str, object] = {
        "model": model_config.to_dict(),
        "training": training.to_dict(),
        "singletons": not args.no_singletons,
    }

    if not args.skip_training:
        started = time.perf_counter()
        run = Run(work / "run", remove_singletons=True, log_params={"preset": "cpu_minilm_32min"})
        train_baseline(corpus, model_config, training, run)
        results["wall_minutes"] = (time.perf_counter() - started) / 60
    trained = CorefModel.load(work / "run" / "best")
    results["model"] = trained.config.to_dict()  # as trained: mention_loss_coef auto decided by the corpus
    results["training"]["precision"] = resolve_precision(training.precision, torch.device("cpu"))
    state = json.loads((sorted((work / "run" / "checkpoints").glob("step-*"))[-1] / "state.json").read_text())
    train_state = state["train_state"]
    results["training_minutes"] = train_state["train_seconds"] / 60
    results["steps"] = train_state["global_step"]
    results["train_documents_per_second"] = train_state["global_step"] / train_state["train_seconds"]
    results["best_dev_conll_f1"] = train_state["best_f1"]
    results["best_step"] = train_state["best_step"]
    curve_file = work / "run" / "dvclive" / "plots" / "metrics" / "dev" / "conll_f1.tsv"
    if curve_file.is_file():
        rows = [line.split("\t") for line in curve_file.read_text().splitlines()[1:]]
        results["dev_curve"] = [[int(step), round(float(value), 2)] for step, value in rows]
        plot_learning_curve(work / "run" / "dvclive", work / "learning_curve.png")

    test_documents = corpus.documents("test", model_config.max_segment_len)
    predictions = trained.predict_documents(test_documents, total=len(test_documents))
    test_scores = score_predictions(predictions, remove_singletons=True)
    results["test"] = {
        "conll_f1": 100 * test_scores.conll_f1,
        **{f"{m}_f1": 100 * test_scores[m].f1 for m in ("muc", "bcub", "ceafe")},
        "mention_recall": 100 * test_scores.mentions.recall,
        "mention_precision": 100 * test_scores.mentions.precision,
    }
    results["inference"] = {}
    if not args.skip_inference:
        run_precision = results["training"]["precision"]
        settings = [("32", None, None)] + [(run_precision, int(c), None) for c in args.inference_antecedents.split(",")]
        settings += [(run_precision, None, float(x)) for x in args.inference_min_coarse_scores.split(",") if x.strip()]
        for precision, antecedents, floor in settings:
            name = precision if antecedents is None else f"{precision}, {antecedents} antecedents"
            name += "" if floor is None else f", min coarse score {floor:g}"
            model = CorefModel.load(
                work / "run" / "best", precision=precision, max_top_antecedents=antecedents, min_coarse_score=floor
            )
            results["inference"][name] = inference_ratio(model, test_documents)
        plot_inference_tradeoff(results["inference"], work / "inference_tradeoff.png")
    if args.throughput_steps > 0:
        results["throughput_peer_config"] = throughput(corpus, args.throughput_steps, training.precision)
    results["peak_rss_mb"] = peak_memory_mb()
    (work / "results.json").write_text(json.dumps(results, indent=2) + "\n")

    print(
        f"test CoNLL F1 {results['test']['conll_f1']:.2f} (best dev {results['best_dev_conll_f1']:.2f} at step "
        f"{results['best_step']} of {results['steps']})"
    )
    print(
        f"test mentions: recall {results['test']['mention_recall']:.2f}, "
        f"precision {results['test']['mention_precision']:.2f} (singletons removed from the key)"
    )
    print(f"training {results['training_minutes']:.1f} min, {results['train_documents_per_second']:.3f} documents/s")
    if "throughput_peer_config" in results:
        peer = results["throughput_peer_config"]
        print(
            f"peer configuration ({peer['precision']}): {peer['seconds_per_document']:.2f} s/document "
            f"({1 / peer['seconds_per_document']:.3f} documents/s) over {peer['steps']} steps"
        )
    for name, inference in results["inference"].items():
        print(
            f"inference at {name}: {inference['predict_seconds']:.2f} s vs encoder "
            f"{inference['encoder_seconds']:.2f} s at the same precision = {inference['ratio']:.2f}x on "
            f"{len(test_documents)} test documents (test CoNLL F1 {inference['test_conll_f1']:.2f})"
        )
    print(f"peak resident memory {results['peak_rss_mb']:.0f} MB")
    print("dev curve (step, CoNLL F1):", results.get("dev_curve"))


if __name__ == "__main__":
    main()
