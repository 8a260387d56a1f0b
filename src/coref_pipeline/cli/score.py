"""``coref-pipeline score KEY.conll RESPONSE.conll [--metrics ...] [--json] ...``: the reference scorer's numbers.

It imports the scorer and numpy, nothing else: no torch, transformers or pandas.
"""

from __future__ import annotations

import json
import os
import sys

import click

from coref_pipeline.cli import CommandError

# numpy comes with the metrics below. The scorer calls no BLAS routine, and OpenBLAS
# starting its thread pool is about half of numpy's import time: one thread, unless the
# user chose otherwise. Once numpy is imported (a test, a notebook) it is too late and left alone.
if "numpy" not in sys.modules:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from coref_pipeline.evaluation.metrics import METRIC_NAMES  # noqa: E402
from coref_pipeline.evaluation.scoring import (  # noqa: E402
    DEFAULT_METRICS,
    CorpusScores,
    DocumentScores,
    check_metrics,
)

EXIT_OK = 0
EXIT_ERROR = 2
CORPUS_LABEL = "(corpus)"
ERROR_PREFIX = "score: "


def parse_metric_list(value: str) -> tuple[str, ...]:
    """``"muc,bcub"`` -> ``("muc", "bcub")``; an unknown name or an empty list is a ``ValueError``."""
    names = [name.strip().lower() for name in value.split(",") if name.strip()]
    if not names:
        raise ValueError("no metric given")
    return check_metrics(names)


class MetricList(click.ParamType):
    """A comma-separated list of metric names; an unknown one is a usage error."""

    name = "metrics"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> tuple[str, ...]:
        if isinstance(value, tuple):
            return value
        try:
            return parse_metric_list(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)


@click.command(
    "score",
    short_help="score a response CoNLL-2012 file against a key file (reference scorer v8.01 metrics)",
    help=(
        "Coreference scores of RESPONSE against KEY, pooled over documents as the CoNLL-2012 "
        "reference scorer v8.01 does. Documents are matched by name and part. KEY.conll: gold "
        "CoNLL-2012 file. RESPONSE.conll: system CoNLL-2012 file."
    ),
)
@click.argument("key", metavar="KEY.conll")
@click.argument("response", metavar="RESPONSE.conll")
@click.option(
    "--metrics",
    type=MetricList(),
    default=",".join(DEFAULT_METRICS),
    help=f"comma-separated metrics among {','.join(METRIC_NAMES)} (default: {','.join(DEFAULT_METRICS)})",
)
@click.option("--json", "as_json", is_flag=True, help="print JSON with raw numerators and denominators")
@click.option("--per-document", is_flag=True, help="also show each document's scores")
@click.option("--remove-singletons", is_flag=True, help="drop one-mention clusters from key and response first")
def score(
    key: str, response: str, metrics: tuple[str, ...], as_json: bool, per_document: bool, remove_singletons: bool
) -> None:
    """Print the scores; an error is one line ``score: error: ...`` on stderr with exit code 2."""
    from coref_pipeline.evaluation.scoring import score_files
    from coref_pipeline.formats.conll import ConllFormatError

    try:
        scores = score_files(key, response, metrics, remove_singletons=remove_singletons)
    except (OSError, ConllFormatError, ValueError) as error:
        raise CommandError(error, prefix=ERROR_PREFIX) from None
    if as_json:
        click.echo(json.dumps(scores.to_dict(per_document=per_document), indent=2))
    else:
        click.echo(format_scores_table(scores, per_document=per_document))


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
