"""Pronoun probes: does a model find the obvious pair without merging strangers? Both models, short texts.

Run: python benchmarks/prediction/pronoun_probes.py [--models data/06_models/baseline data/06_models/incremental]
                                                    [--probes data/01_raw/probes/pronoun_probes.jsonl]
                                                    [--min-coarse-score=X] [--top-span-ratio R]

Each probe (``pronoun_probes.jsonl``: 60 short texts written for this project, none from a training corpus: the
first 36 when the main job was first measured, 24 more while its learning rates were chosen; 20 more held out in
``pronoun_probes_heldout.jsonl``, written after the main job's settings were chosen: ``--probes`` reads them) has
an unambiguous pronoun and its antecedent and lists every mention of the text by entity, with at least one other
entity (a second person, a place, an object) that must stay out of the pair's cluster. Each model predicts each
text with ``CorefModel.predict`` (its defaults); a probe is **right** when the pair shares a cluster that holds only
mentions of their entity (``coref_pipeline.studies.probes``). Prints, per model, the probes right, the pairs
linked, the wrong merges (clusters with two entities) and the non-mentions (spans that are no listed mention)
anywhere, then every probe a model got wrong with its clusters. Figures go to stdout and to
``data/benchmarks/pronoun_probes/results.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import dataclasses

from benchmarks.common import PROBES, RESULTS, ROOT, host, write_results
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.studies.probes import ProbeError, judge_predictions, read_probes, summarize_probes

MODELS = [ROOT / "data" / "06_models" / "baseline", ROOT / "data" / "06_models" / "incremental"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=Path, nargs="+", default=MODELS, help="model directories")
    parser.add_argument("--probes", type=Path, default=PROBES, help="a probe file (jsonlines)")
    parser.add_argument("--out", type=Path, default=RESULTS / "pronoun_probes" / "results.json")
    parser.add_argument(
        "--min-coarse-score",
        type=float,
        default=None,
        help="the fine stage's floor instead of each model's own (--min-coarse-score=-1e9: every pair fine-scored)",
    )
    parser.add_argument(
        "--top-span-ratio",
        type=float,
        default=None,
        help="the spans the pruning keeps, as a share of the subtokens, instead of each model's own",
    )
    args = parser.parse_args()
    try:
        probes = read_probes(args.probes)
    except (ProbeError, OSError) as error:
        sys.exit(str(error))
    results: dict = {
        "host": host(),
        "probes": str(args.probes),
        "min_coarse_score": args.min_coarse_score,
        "top_span_ratio": args.top_span_ratio,
        "models": {},
    }
    for directory in args.models:
        model = CorefModel.load(directory, min_coarse_score=args.min_coarse_score)
        if args.top_span_ratio is not None:  # read by the baseline's pruning at every prediction
            model.model.config = dataclasses.replace(model.model.config, top_span_ratio=args.top_span_ratio)
        judgements = judge_predictions(model, probes)
        summary = summarize_probes(judgements)
        print(
            f"{directory}: {summary.right} of {summary.probes} right ({100 * summary.right_share:.1f}%), "
            f"{summary.linked} pairs linked, {summary.wrong_merges} wrong merges, {summary.non_mentions} non-mentions"
        )
        for probe, judgement in zip(probes, judgements, strict=True):
            if not judgement.right or judgement.wrong_merges or judgement.non_mentions:
                print(f"  {probe.source}: {probe.text}\n    clusters: {[list(c) for c in judgement.clusters]}")
        results["models"][str(directory)] = {
            **summary.to_dict(),
            "wrong": [
                {"probe": probe.source, "text": probe.text, "clusters": [list(c) for c in judgement.clusters]}
                for probe, judgement in zip(probes, judgements, strict=True)
                if not judgement.right or judgement.wrong_merges or judgement.non_mentions
            ],
        }
    print(f"host: {results['host']}")
    write_results(results, args.out)


if __name__ == "__main__":
    main()
