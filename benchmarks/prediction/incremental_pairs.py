"""The incremental model's fine-scored pairs: how many its decisions read, and what the pre-filter's margin costs.

Run: python benchmarks/prediction/incremental_pairs.py [--model data/06_models/incremental]
     [--baseline data/06_models/baseline] [--margins 0 0.25 0.5 1] [--precision auto] [--ontonotes 30] [--rounds 3]
     [--work-dir DIR]

The incremental model decides a segment's spans one after another on the host, each among the active columns
(its entities' recent mentions) above the coarse floor, the ``max_top_entities`` best by coarse score; the fine
FFNN scores those pairs in batched passes before the decisions read them (``models/incremental/scoring.py``):

1. the static pass scores each span's best ``K + ceil(K * margin)`` columns by coarse score among those that may be
   active when the span is decided (``INFERENCE_PREFILTER_MARGIN`` at inference);
2. when a decision meets a pair without its score (a column among its K best that the static pass ranked beyond
   the margin: a column of its entity superseded by a newer mention moves the next one up), a missing-pairs round
   scores it and the next best columns of every later span of the segment.

Whatever the margin, every decision reads the same scores, so the clusters are the same (checked here against the
model's own margin, document by document); what the margin changes is how many pairs are scored and in how many
passes. For each document set (LitBank test and the OntoNotes-shaped documents, as ``throughput.py`` writes them)
and each ``--margins`` value, one counted pass then ``--rounds`` timed passes (after a warm-up) of
``CorefModel.predict_documents`` in this process (``--precision``: as ``predict``'s, ``auto`` by default) print: the
pairs of the static pass, the missing-pairs rounds and their pairs, the pairs the decisions read (each span's
options), the spans whose options the decisions weighed (at inference a span with no static column above its coarse
floor starts an entity without), the seconds of a pass (the median) and whether the clusters are the model's own.
With ``--baseline``: the baseline's fine-scored pairs on the same documents (its ``PairScorer.scores`` calls), the
figure the incremental model's are read against. Figures go to stdout and to ``WORK_DIR/results.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import collections
import contextlib
import functools
import statistics
import time
from collections.abc import Iterator
from unittest import mock

import torch

from benchmarks.common import RESULTS, ROOT, host, require_litbank, write_results
from benchmarks.prediction.throughput import write_sets
from coref_pipeline.files import read_jsonlines
from coref_pipeline.models.incremental import decisions, scoring
from coref_pipeline.models.scorers import PairScorer
from coref_pipeline.serving.coref_model import CorefModel

WORK = RESULTS / "incremental_pairs"
MODEL = ROOT / "data" / "06_models" / "incremental"
BASELINE = ROOT / "data" / "06_models" / "baseline"
OWN = "  (the model's own)"
COUNTED = ("static_pairs", "missing_rounds", "missing_pairs", "read_pairs", "spans", "spans_weighed")


@contextlib.contextmanager
def counted_pairs(counts: collections.Counter) -> Iterator[None]:
    """Count, while open, the static pass's pairs and spans, the missing-pairs rounds and their pairs, the spans
    whose options the decisions weighed and the options they read, into ``counts``."""

    def sized(key: str, method):
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            before = self.size
            result = method(self, *args, **kwargs)
            counts[key] += self.size - before
            if key == "missing_pairs":
                counts["missing_rounds"] += 1
            else:  # the static pass: the segment's read spans
                counts["spans"] += len(self.located_host)
            return result

        return wrapper

    def read(options_of):
        @functools.wraps(options_of)
        def wrapper(*args, **kwargs):
            rows, entities, required = options_of(*args, **kwargs)
            counts["read_pairs"] += len(rows)
            counts["spans_weighed"] += 1
            return rows, entities, required

        return wrapper

    with contextlib.ExitStack() as stack:
        segment = scoring.SegmentScores
        stack.enter_context(mock.patch.object(segment, "static_pass", sized("static_pairs", segment.static_pass)))
        stack.enter_context(mock.patch.object(segment, "score_missing", sized("missing_pairs", segment.score_missing)))
        stack.enter_context(mock.patch.object(decisions, "options_of", read(decisions.options_of)))
        yield


@contextlib.contextmanager
def counted_fine_pairs(counts: collections.Counter) -> Iterator[None]:
    """Count the pairs ``PairScorer.scores`` scores (its ``index``, ``[k, c]``) into ``counts["fine_pairs"]``: the
    outermost call's (under autocast the method calls itself once more)."""
    scores = PairScorer.scores
    depth = [0]

    @functools.wraps(scores)
    def wrapper(self, *args, **kwargs):
        if not depth[0]:
            index = kwargs["index"] if "index" in kwargs else args[2]
            counts["fine_pairs"] += index.numel()
        depth[0] += 1
        try:
            return scores(self, *args, **kwargs)
        finally:
            depth[0] -= 1

    with mock.patch.object(PairScorer, "scores", wrapper):
        yield


def pass_seconds(trained: CorefModel, documents: list[dict], rounds: int) -> float:
    """The median seconds of ``rounds`` prediction passes over ``documents``, after one that warms up."""
    seconds = []
    for round_number in range(rounds + 1):
        begun = time.perf_counter()
        trained.predict_documents(documents, progress=False)
        if round_number:
            seconds.append(time.perf_counter() - begun)
    return statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=MODEL, help="an incremental model directory")
    parser.add_argument(
        "--baseline", type=Path, default=BASELINE, help="a baseline model directory whose fine-scored pairs to count"
    )
    parser.add_argument(
        "--margins", type=float, nargs="+", default=[0.0, 0.25, scoring.INFERENCE_PREFILTER_MARGIN, 1.0],
        help="the static pass's margins over max_top_entities to measure (the model's own is "
        f"{scoring.INFERENCE_PREFILTER_MARGIN:g})",
    )  # fmt: skip
    parser.add_argument("--precision", default="auto", choices=["32", "auto"], help="as predict's (default auto)")
    parser.add_argument("--ontonotes", type=int, default=30, help="OntoNotes-shaped documents")
    parser.add_argument("--rounds", type=int, default=3, help="timed passes over each set (the median kept)")
    parser.add_argument("--work-dir", type=Path, default=WORK)
    args = parser.parse_args()
    require_litbank()
    for model in (args.model, args.baseline):
        if not (model / "coref_config.json").is_file():
            sys.exit(f"no model at {model}: run the main job first (README), or name one with --model / --baseline")
    trained = CorefModel.load(args.model, precision=args.precision, for_prediction=True)
    if trained.model.config.max_top_entities is None:
        sys.exit(f"{args.model}: no max_top_entities, so no pre-filter and no margin to measure")
    sets = write_sets(args.model, args.work_dir, args.ontonotes)
    documents_of = {name: list(read_jsonlines(path)) for name, path in sets.items()}
    print(f"host: {host()}, torch {torch.__version__}, {torch.get_num_threads()} threads, {trained.precision}")
    baseline_pairs = {}
    baseline = CorefModel.load(args.baseline, precision=args.precision, for_prediction=True)
    for name, documents in documents_of.items():
        counts: collections.Counter = collections.Counter()
        with counted_fine_pairs(counts):
            baseline.predict_documents(documents, progress=False)
        baseline_pairs[name] = counts["fine_pairs"]
    del baseline
    print(
        f"{'set':17} {'margin':>6} {'static pairs':>12} {'missing rounds':>14} {'missing pairs':>13} "
        f"{'scored':>8} {'read':>8} {'read/scored':>11} {'scored/baseline':>15} {'spans weighed':>16} {'pass s':>7} "
        "same clusters"
    )
    rows = []
    own = scoring.INFERENCE_PREFILTER_MARGIN
    for name, documents in documents_of.items():
        own_clusters = [d["predicted_clusters"] for d in trained.predict_documents(documents, progress=False)]
        for margin in args.margins:
            with mock.patch.object(scoring, "INFERENCE_PREFILTER_MARGIN", margin):
                counts = collections.Counter()
                with counted_pairs(counts):
                    predicted = trained.predict_documents(documents, progress=False)
                seconds = pass_seconds(trained, documents, args.rounds)
            scored = counts["static_pairs"] + counts["missing_pairs"]
            same = [d["predicted_clusters"] for d in predicted] == own_clusters
            row = {
                "set": name,
                "margin": margin,
                "own_margin": margin == own,
                **{key: counts[key] for key in COUNTED},
                "scored_pairs": scored,
                "baseline_fine_pairs": baseline_pairs[name],
                "pass_s": seconds,
                "same_clusters": same,
            }
            rows.append(row)
            print(
                f"{name:17} {margin:6.2f} {counts['static_pairs']:12d} {counts['missing_rounds']:14d} "
                f"{counts['missing_pairs']:13d} {scored:8d} {counts['read_pairs']:8d} "
                f"{counts['read_pairs'] / max(1, scored):11.3f} {scored / max(1, baseline_pairs[name]):15.3f} "
                f"{counts['spans_weighed']:>6d} of {counts['spans']:>6d} "
                f"{seconds:7.2f} {'yes' if same else 'NO'}{OWN if margin == own else ''}",
                flush=True,
            )
        print(f"{name:17} the baseline's fine-scored pairs: {baseline_pairs[name]}")
    write_results(
        {"torch": torch.__version__, "threads": torch.get_num_threads(), "precision": trained.precision, "rows": rows},
        args.work_dir / "results.json",
    )


if __name__ == "__main__":
    main()
