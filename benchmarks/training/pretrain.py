"""What SpanBERT's pretraining on LitBank's own text gives the baseline: the paper's ablation rows, two seeds each.

Run: python benchmarks/training/pretrain.py [--rows as_is,span_sbo,span,subword] [--seeds 13,14]
     [--pretrain-minutes 8] [--finetune-minutes 8] [--work-dir DIR] [--report]

Rows (the ``pretrain`` pipeline's ``spanbert`` preset, its ``masking`` and ``sbo`` changed):

* ``as_is``: the packaged MiniLM, not pretrained;
* ``span_sbo``: span masking and the span boundary objective (SpanBERT);
* ``span``: span masking alone (``sbo: false``);
* ``subword``: BERT's subword masking alone (``masking: subword``, ``sbo: false``).

For each row and seed: the encoder is pretrained for ``--pretrain-minutes`` (``time_budget_minutes``; the
schedule fitted to it) on the text of LitBank fold 0's training documents (../shared/corpora/litbank, segmented
at 384 with the MiniLM's tokenizer; 5% of them held out), then the ``cpu_minilm`` preset fine-tunes it
(``coref_train.encoder_from``) for ``--finetune-minutes`` with the same seed, and the best-on-dev model is
scored on test (singletons removed from the key, as the other LitBank benchmarks score). Every row has the
same fine-tuning budget; the pretraining minutes are beside it.

Each (row, seed) writes ``WORK_DIR/ROW_sSEED/result.json`` and is skipped when that file exists, so two
processes (``--seeds 13`` and ``--seeds 14``) can share the work directory; ``--report`` prints the table of
every result there (the mean of the seeds a row) without training.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import json
import logging
import statistics
import time
from dataclasses import replace

from benchmarks.common import LITBANK, ROOT, cpu_minilm_settings, host, segmented_litbank
from coref_pipeline.evaluation.predictions import score_predictions
from coref_pipeline.pretraining.run import pretrain_settings
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.training import Run, train_baseline

WORK = ROOT / "data" / "benchmarks" / "pretrain"
ROWS = {
    "as_is": None,
    "span_sbo": {"masking": "span", "sbo": True},
    "span": {"masking": "span", "sbo": False},
    "subword": {"masking": "subword", "sbo": False},
}


def pretrain_presets() -> dict:
    import yaml

    return yaml.safe_load((ROOT / "conf/base/parameters_pretrain.yml").read_text())["pretrain"]["presets"]


def final_state(work_dir: Path) -> dict:
    checkpoint = sorted((work_dir / "checkpoints").glob("step-*"))[-1]
    return json.loads((checkpoint / "state.json").read_text())["train_state"]


def run_row(row: str, seed: int, args: argparse.Namespace, corpus) -> dict:
    work = args.work_dir / f"{row}_s{seed}"
    result: dict = {"row": row, "seed": seed}
    model_config, training = cpu_minilm_settings(
        {"time_budget_minutes": args.finetune_minutes, "seed": seed, "eval_frequency": 80, "checkpoint_frequency": 80}
    )
    if ROWS[row] is not None:
        config, pretraining = pretrain_settings(
            pretrain_presets(),
            "spanbert",
            {**ROWS[row], "seed": seed, "time_budget_minutes": args.pretrain_minutes, "num_epochs": 100},
        )
        started = time.perf_counter()
        held_out = pretrain_encoder_for(corpus, config, pretraining, work)
        state = final_state(work / "pretrain")
        result["pretrain"] = {
            "minutes": state["train_seconds"] / 60,
            "wall_minutes": (time.perf_counter() - started) / 60,
            "steps": state["global_step"],
            "held_out": held_out,
        }
        model_config = replace(model_config, encoder=str(work / "encoder"), tokenizer=model_config.tokenizer_name)
    train_baseline(corpus, model_config, training, Run(work / "finetune", remove_singletons=True, restart=True))
    state = final_state(work / "finetune")
    trained = CorefModel.load(work / "finetune" / "best")
    test = corpus.documents("test", model_config.max_segment_len)
    scores = score_predictions(trained.predict_documents(test, total=len(test)), remove_singletons=True)
    result["finetune"] = {
        "minutes": state["train_seconds"] / 60,
        "steps": state["global_step"],
        "best_dev_conll_f1": state["best_f1"],
        "best_step": state["best_step"],
    }
    result["test_conll_f1"] = 100 * scores.conll_f1
    result["host"] = host()
    (work / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def pretrain_encoder_for(corpus, config, training, work: Path) -> dict:
    from coref_pipeline.pretraining.run import pretrain_encoder

    run = Run(work / "pretrain", remove_singletons=False, restart=True)
    return pretrain_encoder(corpus, config, training, run, work / "encoder")


def report(work_dir: Path) -> None:
    results = [json.loads(path.read_text()) for path in sorted(work_dir.glob("*_s*/result.json"))]
    if not results:
        sys.exit(f"no results in {work_dir}")
    print(f"host {results[0]['host']}")
    print("| row | test CoNLL F1 by seed | mean | pretraining minutes (steps) | fine-tuning steps |")
    print("|---|---|---|---|---|")
    for row in ROWS:
        mine = [r for r in results if r["row"] == row]
        if not mine:
            continue
        f1 = ", ".join(f"{r['test_conll_f1']:.2f} (s{r['seed']})" for r in mine)
        mean = statistics.mean(r["test_conll_f1"] for r in mine)
        pre = ", ".join(f"{r['pretrain']['minutes']:.1f} ({r['pretrain']['steps']})" for r in mine if "pretrain" in r)
        steps = ", ".join(str(r["finetune"]["steps"]) for r in mine)
        print(f"| {row} | {f1} | {mean:.2f} | {pre or '-'} | {steps} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--seeds", default="13,14")
    parser.add_argument("--pretrain-minutes", type=float, default=8.0)
    parser.add_argument("--finetune-minutes", type=float, default=8.0)
    parser.add_argument("--work-dir", type=Path, default=WORK)
    parser.add_argument("--report", action="store_true", help="print the table of the results in the work dir")
    args = parser.parse_args()
    if args.report:
        report(args.work_dir)
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not (LITBANK / "train.conll").is_file():
        sys.exit(f"shared LitBank corpus not found at {LITBANK}")
    rows = args.rows.split(",")
    unknown = sorted(set(rows) - set(ROWS))
    if unknown:
        sys.exit(f"--rows: unknown {unknown}; rows: {list(ROWS)}")
    model_config, _ = cpu_minilm_settings({})
    corpus = segmented_litbank(model_config.tokenizer_name, model_config.max_segment_len)
    for seed in (int(seed) for seed in args.seeds.split(",")):
        for row in rows:
            if (args.work_dir / f"{row}_s{seed}" / "result.json").is_file():
                continue
            result = run_row(row, seed, args, corpus)
            print(f"{row} seed {seed}: test CoNLL F1 {result['test_conll_f1']:.2f}")
    report(args.work_dir)


if __name__ == "__main__":
    main()
