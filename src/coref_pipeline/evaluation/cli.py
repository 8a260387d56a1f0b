"""The ``score`` subcommand: ``score KEY.conll RESPONSE.conll [--metrics ...] [--json] ...``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from coref_pipeline.conll import ConllFormatError
from coref_pipeline.evaluation.metrics import METRIC_NAMES
from coref_pipeline.evaluation.scoring import DEFAULT_METRICS, CorpusScores, DocumentScores, check_metrics, score_files

EXIT_OK = 0
EXIT_ERROR = 2
CORPUS_LABEL = "(corpus)"


def parse_metric_list(value: str) -> tuple[str, ...]:
    """``"muc,bcub"`` -> ``("muc", "bcub")``; an unknown name is an argparse error."""
    names = [name.strip().lower() for name in value.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("no metric given")
    try:
        return check_metrics(names)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_score_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``score`` subcommand to an ``argparse`` subparsers object; its ``func`` returns an exit code."""
    parser = subparsers.add_parser(
        "score",
        help="score a response CoNLL-2012 file against a key file (reference scorer v8.01 metrics)",
        description=(
            "Coreference scores of RESPONSE against KEY, pooled over documents as the CoNLL-2012 "
            "reference scorer v8.01 does. Documents are matched by name and part."
        ),
    )
    parser.add_argument("key", metavar="KEY.conll", help="gold CoNLL-2012 file")
    parser.add_argument("response", metavar="RESPONSE.conll", help="system CoNLL-2012 file")
    parser.add_argument(
        "--metrics",
        type=parse_metric_list,
        default=DEFAULT_METRICS,
        help=f"comma-separated metrics among {','.join(METRIC_NAMES)} (default: {','.join(DEFAULT_METRICS)})",
    )
    parser.add_argument("--json", action="store_true", help="print JSON with raw numerators and denominators")
    parser.add_argument("--per-document", action="store_true", help="also show each document's scores")
    parser.add_argument(
        "--remove-singletons", action="store_true", help="drop one-mention clusters from key and response first"
    )
    parser.set_defaults(func=run_score)
    return parser


def run_score(args: argparse.Namespace) -> int:
    """Handler of ``score``: prints the scores; errors go to stderr as one line with exit code 2."""
    try:
        scores = score_files(args.key, args.response, args.metrics, remove_singletons=args.remove_singletons)
    except (OSError, ConllFormatError, ValueError) as error:
        message = " ".join(str(error).split())
        print(f"score: error: {message}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        print(json.dumps(scores.to_dict(per_document=args.per_document), indent=2))
    else:
        print(format_scores_table(scores, per_document=args.per_document))
    return EXIT_OK


def _percent(value: float) -> str:
    return f"{100 * value:.2f}"


def _score_rows(label: str, scores: CorpusScores | DocumentScores) -> list[list[str]]:
    """Rows ``[label, metric, R, P, F1]``: mention identification, each metric, then CoNLL if available."""
    named_counts = [("mentions", scores.mentions), *scores.metrics.items()]
    rows = [
        [label, name, _percent(counts.recall), _percent(counts.precision), _percent(counts.f1)]
        for name, counts in named_counts
    ]
    if scores.conll_f1 is not None:
        rows.append([label, "CoNLL", "", "", _percent(scores.conll_f1)])
    return rows


def format_scores_table(scores: CorpusScores, per_document: bool = False) -> str:
    """A plain-text table: recall, precision and F1 in percent per metric, and the CoNLL F1 row.

    With ``per_document`` each document's rows come first, under a Document column.
    """
    header = ["Document", "Metric", "Recall", "Precision", "F1"]
    rows: list[list[str]] = []
    if per_document:
        for document in scores.documents:
            rows.extend(_score_rows(document.doc_key, document))
    rows.extend(_score_rows(CORPUS_LABEL, scores))
    if not per_document:
        header, rows = header[1:], [row[1:] for row in rows]
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
    label_columns = len(header) - 3

    def line(cells: list[str]) -> str:
        return "  ".join(
            cell.ljust(width) if column < label_columns else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join([line(header), *(line(row) for row in rows)])
