"""The head against the encoder in arithmetic: the matrix products' FLOPs of a prediction, and the time they take.

Run: python benchmarks/prediction/head_flops.py [--models data/06_models/baseline data/06_models/incremental]
     [--precisions 32 auto] [--ontonotes 30] [--short-texts 300] [--sets NAME ...] [--rounds 3]
     [--min-coarse-scores F ...] [--work-dir DIR]

The issue's goal for the baseline is a prediction that takes at most 1.2x the encoder's own forward passes. This
program says what the arithmetic allows. For each model, precision and document set (LitBank test and the
OntoNotes-shaped documents, as ``throughput.py`` writes them; and ``--short-texts`` texts of about 17 words, the 60
pronoun probes' texts cycled, what a user with many short documents predicts; ``--sets`` keeps some), each predicted
as ``predict`` does (``predict_documents`` at the device's default budget: on a CPU short documents grouped in the
encoder's passes, 512 subtokens a pass, then the head over a group's documents together: the baseline's whole
head, the incremental model's span scorer):

1. One pass under ``torch.utils.flop_counter.FlopCounterMode`` counts the FLOPs of every matrix product (``mm``,
   ``addmm``, ``bmm``, and the encoder's attention, which the counter does not know on a CPU: 4 b h l s e for
   ``_scaled_dot_product_flash_attention_for_cpu``), split between the encoder's module and the rest (the head:
   the mention scorer, the coarse and fine antecedent scorers, the incremental model's entity passes). Element-wise
   work (softmax, GELU, layer norm, the head's gathers and sums) is not counted. The head's FLOPs are split further:
   the mention scorer (``SpanScorer.top_spans``, ``candidate_scores``, ``score_candidates`` and
   ``span_embeddings``), the fine pair scorer
   (``PairScorer.scores``, with the pairs it scored) and the rest (the coarse scorer's source projection and
   bilinear products, the incremental model's entity updates).
2. ``--rounds`` timed passes (after one that warms the kernels up), in this process, each over every document,
   the encoder's forward passes timed apart (its ``forward`` wrapped); the median pass.
3. Printed: the FLOPs of each part, their ratio (the **FLOP floor**: 1 + head FLOPs / encoder FLOPs is what the
   prediction would take against the encoder if the head's products ran at the encoder's rate and nothing else
   cost time), the measured prediction / encoder ratio, and each part's rate in GFLOP/s.

With ``--min-coarse-scores F ...``: each model also with each coarse floor ``F`` set at its load (``CorefModel.load``'s
``min_coarse_score``), and for each such row the documents whose clusters differ from the model's own setting's.

Figures go to stdout and to ``WORK_DIR/results.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import collections
import contextlib
import functools
import itertools
import re
import statistics
import time
from collections.abc import Iterator
from typing import Any
from unittest import mock

import torch
from torch.utils import flop_counter

from benchmarks.common import ROOT, EncoderClock, host, probe_texts, require_litbank, write_results
from benchmarks.prediction.throughput import write_sets
from coref_pipeline.files import read_jsonlines
from coref_pipeline.formats.conll import DEFAULT_GENRE
from coref_pipeline.models.scorers import PairScorer, SpanScorer
from coref_pipeline.serving.coref_model import CorefModel, as_split_text

WORK = ROOT / "data" / "benchmarks" / "head_flops"
MODELS = [ROOT / "data" / "06_models" / "baseline", ROOT / "data" / "06_models" / "incremental"]
SETS = ["litbank_test", "ontonotes_shaped", "short_texts"]
WRITTEN_SETS = {"litbank_test", "ontonotes_shaped"}  # what throughput.write_sets writes (LitBank test needs it)


def short_text_documents(model: Path, count: int) -> list[dict]:
    """``count`` short texts (``common.probe_texts``) as jsonlines documents, segmented for ``model``."""
    trained = CorefModel.load(model, for_prediction=True)
    return [
        trained.jsonlines_document(as_split_text(text), None, DEFAULT_GENRE, f"short/{index:07d}")
        for index, text in enumerate(probe_texts(count))
    ]


def attention_flops(query, key, value, *args, out_shape=None, **kwargs) -> int:
    """The CPU flash attention's two products (q k^T, then p v): the counter's own formula for SDPA."""
    return flop_counter.sdpa_flop_count(query, key, value)


COUNTED = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: attention_flops}
# The head's parts counted apart (the methods that compute them; a call inside another counted one is the outer's):
# the rest of the head is the coarse scorer (the source projection and the bilinear products) and what is left.
PARTS = {
    # the methods a document predicted alone calls (top_spans, or the incremental model's candidate_scores) and those
    # the baseline's head over a group calls itself (score_candidates, span_embeddings)
    "mention": [
        (SpanScorer, "top_spans"),
        (SpanScorer, "candidate_scores"),
        (SpanScorer, "score_candidates"),
        (SpanScorer, "span_embeddings"),
    ],
    "fine": [(PairScorer, "scores")],
}


@contextlib.contextmanager
def counted_parts(totals: dict[str, float]) -> Iterator[None]:
    """Count the FLOPs of each of ``PARTS`` into ``totals`` (and the fine scorer's pairs into ``totals["pairs"]``)
    while the context is open."""
    active = [False]

    def counting(part: str, method):
        @functools.wraps(method)
        def wrapper(*args, **kwargs):
            if active[0]:
                return method(*args, **kwargs)
            active[0] = True
            try:
                with flop_counter.FlopCounterMode(display=False, custom_mapping=COUNTED) as counter:
                    output = method(*args, **kwargs)
            finally:
                active[0] = False
            totals[part] += counter.get_total_flops() / 1e9
            if part == "fine":
                index = kwargs["index"] if "index" in kwargs else args[3]  # [k, c]: the pairs scored
                totals["pairs"] += index.numel()
            return output

        return wrapper

    with contextlib.ExitStack() as stack:
        for part, methods in PARTS.items():
            for owner, name in methods:
                stack.enter_context(mock.patch.object(owner, name, counting(part, getattr(owner, name))))
        yield


def counted_flops(trained: CorefModel, documents: list[dict]) -> tuple[dict[str, float], list[Any]]:
    """GFLOP of the matrix products of one prediction over ``documents``: the encoder's, the head's and the head's
    parts (the mention scorer, the fine pair scorer and its pairs, the rest); and each document's predicted clusters."""
    parts: dict[str, float] = collections.defaultdict(float)
    with flop_counter.FlopCounterMode(display=False, custom_mapping=COUNTED, depth=2) as counter, counted_parts(parts):
        predicted = trained.predict_documents(documents, progress=False)
    counts = counter.get_flop_counts()
    total = sum(counts["Global"].values()) / 1e9
    # the encoder as the model's module (a document predicted alone) and called itself (a group's passes)
    encoders = [name for name in counts if name == "SegmentEncoder" or re.fullmatch(r"\w+\.encoder", name)]
    encoder = sum(sum(counts[name].values()) for name in encoders) / 1e9
    head = total - encoder
    flops = {
        "encoder_gflop": encoder,
        "head_gflop": head,
        "mention_gflop": parts["mention"],
        "fine_gflop": parts["fine"],
        "other_gflop": head - parts["mention"] - parts["fine"],
        "fine_pairs": int(parts["pairs"]),
    }
    return flops, [document["predicted_clusters"] for document in predicted]


def timed_passes(trained: CorefModel, documents: list[dict], rounds: int) -> dict[str, float]:
    """Seconds of the median of ``rounds`` passes over ``documents`` (after a warm-up pass): the whole prediction
    and the encoder's forward passes within it."""
    passes = []
    with EncoderClock(trained) as clock:
        for round_number in range(rounds + 1):
            clock.reset()
            begun = time.perf_counter()
            for _ in trained.predict_documents(documents, progress=False):
                pass
            if round_number:  # the first pass warms the kernels up
                passes.append((time.perf_counter() - begun, clock.seconds))
    predict = statistics.median(seconds for seconds, _ in passes)
    return {"predict_s": predict, "encoder_s": next(enc for seconds, enc in passes if seconds == predict)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=Path, nargs="+", default=MODELS)
    parser.add_argument("--precisions", nargs="+", default=["32", "auto"], choices=["32", "auto"])
    parser.add_argument("--ontonotes", type=int, default=30, help="OntoNotes-shaped documents")
    parser.add_argument("--short-texts", type=int, default=300, help="short texts (the probes' texts cycled)")
    parser.add_argument("--sets", nargs="+", default=SETS, choices=SETS, help="the document sets measured")
    parser.add_argument("--rounds", type=int, default=3, help="timed passes over each set (the median kept)")
    parser.add_argument(
        "--min-coarse-scores", type=float, nargs="+", default=[], metavar="F",
        help="each model also with these coarse floors, and the documents whose clusters differ from its own setting's",
    )  # fmt: skip
    parser.add_argument("--work-dir", type=Path, default=WORK)
    args = parser.parse_args()
    if WRITTEN_SETS & set(args.sets):
        require_litbank()
    for model in args.models:
        if not (model / "coref_config.json").is_file():
            sys.exit(f"no model at {model}: run the main job first (README), or name one with --models")
    documents_of = {}
    if WRITTEN_SETS & set(args.sets):
        sets = write_sets(args.models[0], args.work_dir, args.ontonotes)
        documents_of = {name: list(read_jsonlines(path)) for name, path in sets.items() if name in args.sets}
    if "short_texts" in args.sets and args.short_texts:
        documents_of["short_texts"] = short_text_documents(args.models[0], args.short_texts)
    rows = []
    print(f"host: {host()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(
        f"{'model':18} {'precision':9} {'set':17} {'encoder GFLOP':>13} {'head GFLOP':>10} {'FLOP floor':>10} "
        f"{'predict s':>9} {'encoder s':>9} {'predict/encoder':>15} {'encoder GFLOP/s':>15} {'head GFLOP/s':>12} "
        f"{'head: mention / fine / other GFLOP':>34} {'fine pairs':>10}"
        + (" documents changed" if args.min_coarse_scores else "")
    )
    own_clusters = {}  # (model, precision, set): the clusters with the model's own coarse floor
    for model, floor, precision in itertools.product(args.models, [None, *args.min_coarse_scores], args.precisions):
        trained = CorefModel.load(model, precision=precision, for_prediction=True, min_coarse_score=floor)
        label = model.name if floor is None else f"{model.name}, F {floor:g}"
        for name, documents in documents_of.items():
            row = {"model": label, "precision": precision, "computes_in": trained.precision, "set": name}
            row["min_coarse_score"] = trained.model.config.min_coarse_score
            flops, clusters = counted_flops(trained, documents)
            row.update(flops)
            if floor is None:
                own_clusters[model, precision, name] = clusters
            else:  # against the model's own floor: how many documents' clusters this one changes
                own = own_clusters[model, precision, name]
                row["documents_changed"] = sum(a != b for a, b in zip(clusters, own, strict=True))
            row.update(timed_passes(trained, documents, args.rounds))
            head_s = row["predict_s"] - row["encoder_s"]
            row["flop_floor"] = 1 + row["head_gflop"] / row["encoder_gflop"]
            row["predict_over_encoder"] = row["predict_s"] / row["encoder_s"]
            row["encoder_gflop_s"] = row["encoder_gflop"] / row["encoder_s"]
            row["head_gflop_s"] = row["head_gflop"] / head_s
            rows.append(row)
            changed = f" {row['documents_changed']:>4d} of {len(documents)} changed" if floor is not None else ""
            print(
                f"{label:18} {precision:9} {name:17} {row['encoder_gflop']:13.1f} {row['head_gflop']:10.1f} "
                f"{row['flop_floor']:10.3f} {row['predict_s']:9.2f} {row['encoder_s']:9.2f} "
                f"{row['predict_over_encoder']:15.3f} {row['encoder_gflop_s']:15.1f} {row['head_gflop_s']:12.1f} "
                f"{row['mention_gflop']:12.1f} / {row['fine_gflop']:6.1f} / {row['other_gflop']:8.1f} "
                f"{row['fine_pairs']:10d}{changed}",
                flush=True,
            )
    write_results(
        {"torch": torch.__version__, "threads": torch.get_num_threads(), "rows": rows}, args.work_dir / "results.json"
    )


if __name__ == "__main__":
    main()
