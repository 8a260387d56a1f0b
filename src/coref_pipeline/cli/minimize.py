"""``coref-pipeline minimize``: a CoNLL-2012 file -> Joshi-format jsonlines, as ``minimize.py``."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from coref_pipeline.cli import CommandError
from coref_pipeline.pretrained import EMBEDDED_MINILM

logger = logging.getLogger(__name__)


@click.command(
    "minimize",
    short_help="CoNLL-2012 -> jsonlines (as minimize.py)",
    help=(
        "CoNLL-2012 -> jsonlines (as minimize.py), with the code of the preprocess and segment nodes. "
        "INPUT: a CoNLL-2012 file (*_gold_conll layout). OUTPUT: the jsonlines file to write; how it was "
        "segmented (the tokenizer) is written beside it as OUTPUT-NAME.segmentation.json, which predict checks."
    ),
)
@click.argument("input_path", metavar="INPUT")
@click.argument("output_path", metavar="OUTPUT")
@click.option(
    "--tokenizer",
    default=EMBEDDED_MINILM,
    help=f"HF tokenizer: hub id (e.g. bert-base-cased), local folder, or {EMBEDDED_MINILM} (default)",
)
@click.option(
    "--seg-len",
    default="384",
    help="segment length: subtokens, as minimize.py (default 384), or 'Nsent' for N sentences per segment",
)
@click.option("--min-columns", type=int, default=12, help="columns a row needs (default 12)")
@click.option("--skip-bad-documents", is_flag=True, help="report and skip bad documents")
@click.option("--no-tokens", is_flag=True, help="omit the 'tokens' field (as minimize.py)")
def minimize(
    input_path: str,
    output_path: str,
    tokenizer: str,
    seg_len: str,
    min_columns: int,
    skip_bad_documents: bool,
    no_tokens: bool,
) -> None:
    from coref_pipeline.config_base import ConfigError
    from coref_pipeline.files import write_jsonlines
    from coref_pipeline.formats.conll import ConllFile, ConllFormatError
    from coref_pipeline.formats.corpus import PreprocessSettings, preprocess_corpus
    from coref_pipeline.formats.segmentation import (
        SegmentationError,
        SegmentationRecord,
        SegmentLength,
        segment_words,
        sidecar_path,
    )
    from coref_pipeline.pretrained import load_tokenizer

    try:
        length = SegmentLength.parse(seg_len).label
    except ValueError as error:
        raise CommandError(f"--seg-len: {error}") from None

    try:
        settings = PreprocessSettings(min_columns=min_columns, skip_bad_documents=skip_bad_documents)
        frame = preprocess_corpus(ConllFile.read(input_path), settings)
    except (ConllFormatError, ConfigError) as error:
        raise CommandError(error) from None
    try:
        hf_tokenizer = load_tokenizer(tokenizer)
    except (OSError, ValueError, TypeError) as error:
        raise CommandError(f"--tokenizer {tokenizer}: {error}") from None
    try:
        by_length = segment_words(frame, hf_tokenizer, [length], not no_tokens, f"minimize {Path(input_path).name}")
    except SegmentationError as error:
        raise CommandError(error) from None
    record = SegmentationRecord.of(tokenizer, hf_tokenizer, [length])
    sidecar = sidecar_path(output_path)
    # A stale record must not describe the new documents if the run stops between the two writes.
    sidecar.unlink(missing_ok=True)
    write_jsonlines(output_path, by_length[length])
    record.save(sidecar)
    documents = f"{len(frame)} document{'' if len(frame) == 1 else 's'}"
    logger.info("Wrote %s to %s (segmentation record: %s)", documents, output_path, sidecar)
