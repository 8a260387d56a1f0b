"""``coref-pipeline conll-stats``: documents, sentences, words, mentions, entities, ... of CoNLL-2012 files."""

from __future__ import annotations

import json

import click

from coref_pipeline.cli import CommandError

STAT_COLUMNS = ["documents", "sentences", "words", "mentions", "entities", "singletons", "longest_document_words"]


@click.command(
    "conll-stats",
    short_help="documents, sentences, words, mentions, entities, ...",
    help="Documents, sentences, words, mentions, entities, singletons and the longest document of each FILE "
    "(CoNLL-2012 files).",
)
@click.argument("files", nargs=-1, required=True, metavar="FILES...")
@click.option("--min-columns", type=int, default=12, help="columns a row needs (default 12)")
@click.option("--skip-bad-documents", is_flag=True, help="report and skip bad documents")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def conll_stats(files: tuple[str, ...], min_columns: int, skip_bad_documents: bool, as_json: bool) -> None:
    from coref_pipeline.formats.conll import ConllFormatError, document_stats, read_conll

    results = {}
    for name in files:
        try:
            documents = read_conll(name, min_columns=min_columns, skip_bad_documents=skip_bad_documents)
        except (ConllFormatError, OSError) as error:
            raise CommandError(error) from None
        results[name] = document_stats(documents)
    if as_json:
        click.echo(json.dumps(results, indent=2))
        return
    header = ["file", *STAT_COLUMNS, "longest_document"]
    rows = [
        [name, *(str(stats[key]) for key in STAT_COLUMNS), str(stats["longest_document"])]
        for name, stats in results.items()
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
