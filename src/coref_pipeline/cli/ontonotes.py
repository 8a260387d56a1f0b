"""``coref-pipeline ontonotes``: OntoNotes 5.0 as the CoNLL-2012 files the CoNLL-2012 scripts make.

``--release RELEASE_DIR --skeletons SKELETON_DIR OUT_DIR`` fills the gold skeletons from the LDC release
as ``skeleton2conll.py`` does and compiles each split as ``setup_training.sh`` does; ``--parquet
PARQUET_DIR OUT_DIR`` writes the same files from the Hub's ``conll2012_ontonotesv5`` export.
"""

from __future__ import annotations

import logging

import click

from coref_pipeline.cli import CommandError

logger = logging.getLogger(__name__)


@click.command(
    "ontonotes",
    short_help="OntoNotes 5.0 (the LDC release, or the Hub's Parquet) -> train/dev/test CoNLL-2012 files",
    help=(
        "Write OUT_DIR/{train,dev,test}.LANGUAGE.VERSION_gold_conll as the CoNLL-2012 scripts make them "
        "(skeleton2conll.py on each gold skeleton, then each split's files concatenated in name order), "
        "from the LDC release and the CoNLL-2012 skeletons (--release with --skeletons), or from the Hub's "
        "conll2012_ontonotesv5 Parquet files (--parquet). OUT_DIR is replaced whole, or left as it was."
    ),
)
@click.argument("out_dir", metavar="OUT_DIR")
@click.option("--release", metavar="RELEASE_DIR", help="ontonotes-release-5.0 (or its data/files/data)")
@click.option(
    "--skeletons",
    metavar="SKELETON_DIR",
    help="the CoNLL-2012 skeletons: the .tar.gz archives' folder, where they were extracted, or the v12 tree",
)
@click.option("--parquet", metavar="PARQUET_DIR", help="the Hub's export: a config folder (english_v4) or its parent")
@click.option("--language", default="english", show_default=True, help="english or chinese (Parquet: arabic too)")
@click.option("--version", "version", default=None, help="v4 or v12 (default: the one the sources hold)")
@click.option(
    "--test-partition",
    default="test",
    show_default=True,
    help="the skeletons' test partition (the v12 tree also has conll-2012-test)",
)
@click.option("--no-progress", is_flag=True, help="no progress bar")
def ontonotes(
    out_dir: str,
    release: str | None,
    skeletons: str | None,
    parquet: str | None,
    language: str,
    version: str | None,
    test_partition: str,
    no_progress: bool,
) -> None:
    from coref_pipeline.formats.ontonotes import hub_corpus, release_corpus

    if parquet and (release or skeletons):
        raise CommandError("give --parquet, or --release with --skeletons, not both")
    if parquet:
        corpus = hub_corpus(parquet, language, version, progress=not no_progress)
    elif release and skeletons:
        corpus = release_corpus(release, skeletons, language, version, test_partition, progress=not no_progress)
    else:
        raise CommandError("give --release RELEASE_DIR with --skeletons SKELETON_DIR, or --parquet PARQUET_DIR")
    for path in corpus.write(out_dir):
        click.echo(str(path))
