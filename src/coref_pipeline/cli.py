"""The ``coref-pipeline`` command: the pipelines' code on any file."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import click

logger = logging.getLogger(__name__)


@click.group(name="coref-pipeline")
def cli() -> None:
    """coref-pipeline: run its pipelines with `kedro run --pipelines=NAME`; its own tool is `coref-pipeline`."""
    # Kedro merges a project's ``<package>.cli`` group into ``kedro``; this one adds no command.


def _minimize(args: argparse.Namespace) -> int:
    """CoNLL-2012 file -> Joshi-format jsonlines, as the ``preprocess`` and ``segment`` nodes do."""
    from coref_pipeline.conll import ConllFormatError
    from coref_pipeline.datasets import ConllFile, JsonLinesDataset
    from coref_pipeline.encoders import resolve_encoder
    from coref_pipeline.pipelines.preprocess.nodes import preprocess_conll
    from coref_pipeline.pipelines.segment.nodes import segment_frame
    from coref_pipeline.segmentation import SegmentationError, load_tokenizer

    path = Path(args.input)
    if not path.is_file():
        print(f"error: {path}: no such file", file=sys.stderr)
        return 2
    params = {
        "min_columns": args.min_columns,
        "skip_bad_documents": args.skip_bad_documents,
        "genres": ["bc", "bn", "mz", "nw", "pt", "tc", "wb"],
        "default_genre": "nw",
    }
    try:
        frame = preprocess_conll(ConllFile(str(path), path.read_text(encoding="utf-8")), params)
        tokenizer = load_tokenizer(resolve_encoder(args.tokenizer))
        documents = segment_frame(frame, tokenizer, [args.seg_len], not args.no_tokens, f"minimize {path.name}")
    except (ConllFormatError, SegmentationError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    JsonLinesDataset(args.output).save(documents[args.seg_len])
    logger.info("Wrote %d documents to %s", len(frame), args.output)
    return 0


def _conll_stats(args: argparse.Namespace) -> int:
    """Corpus counts per file."""
    from coref_pipeline.conll import ConllFormatError, document_stats, read_conll

    results = {}
    for name in args.files:
        try:
            documents = read_conll(name, min_columns=args.min_columns, skip_bad_documents=args.skip_bad_documents)
        except (ConllFormatError, OSError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        results[name] = document_stats(documents)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    keys = ["documents", "sentences", "words", "mentions", "entities", "singletons", "longest_document_words"]
    header = ["file", *keys, "longest_document"]
    rows = [
        [name, *(str(stats[key]) for key in keys), str(stats["longest_document"])] for name, stats in results.items()
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0


def _predict(args: argparse.Namespace) -> int:
    """Predict clusters with a trained model directory; write jsonlines, and a CoNLL file and an HTML view."""
    from coref_pipeline.conll import ConllFormatError, atomic_write_text, format_conll_document, write_conll_response
    from coref_pipeline.datasets import JsonLinesDataset
    from coref_pipeline.inputs import read_predict_inputs
    from coref_pipeline.predict import CorefModel, result_from_jsonlines, word_clusters
    from coref_pipeline.visualize import HtmlView

    if args.gold_conll and not args.conll:
        print("error: --gold-conll needs --conll (the response file to write)", file=sys.stderr)
        return 2
    try:
        model = CorefModel.load(args.model, max_inference_subtokens=args.max_subtokens)
        inputs = read_predict_inputs(args.input)
        if inputs.kind == "jsonlines":
            needs_words = bool(args.html or (args.conll and not args.gold_conll))
            without_words = [document["doc_key"] for document in inputs.records if "tokens" not in document]
            if needs_words and without_words:
                print(
                    f"error: {args.input}: documents without the 'tokens' field (the words), needed for --html "
                    f"and for --conll without --gold-conll: {without_words[:3]}",
                    file=sys.stderr,
                )
                return 2
            outputs = model.predict_documents(inputs.records, total=len(inputs.records))
            results = [result_from_jsonlines(document) for document in outputs] if needs_words else []
        else:
            if args.gold_conll:
                print("error: --gold-conll is for Joshi-format input (text has no gold file)", file=sys.stderr)
                return 2
            results = list(model.predict_many(inputs.records, genre=args.genre))
            outputs = [result.to_dict() for result in results]
    except (OSError, ValueError, KeyError) as error:  # DocumentTooLongError, SegmentationError are ValueErrors
        print(f"error: {error}", file=sys.stderr)
        return 2
    JsonLinesDataset(args.output).save(outputs)
    logger.info("Wrote %d documents to %s", len(outputs), args.output)
    if args.conll:
        try:
            if args.gold_conll:
                clusters = {document["doc_key"]: word_clusters(document) for document in outputs}
                write_conll_response(args.gold_conll, clusters, args.conll)
            else:
                text = "".join(
                    format_conll_document(result.doc_key, result.sentences, result.clusters) for result in results
                )
                atomic_write_text(args.conll, text)
        except (OSError, ConllFormatError, KeyError, ValueError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        logger.info("Wrote CoNLL-2012 predictions to %s", args.conll)
    if args.html:
        HtmlView(results, title=f"coref-pipeline predict: {Path(args.input).name}").save(args.html)
        logger.info("Wrote the HTML view to %s", args.html)
    return 0


def _import_hocon(args: argparse.Namespace) -> int:
    """An experiments.conf entry as a coref_train preset (YAML)."""
    from coref_pipeline.hocon import import_experiment, preset_yaml
    from coref_pipeline.models.config import ConfigError

    try:
        preset, left_out = import_experiment(args.conf, args.name)
    except (OSError, KeyError, ValueError, ConfigError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    text = preset_yaml(args.name, preset, left_out, args.conf)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        print(text, end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="coref-pipeline", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    subparsers = parser.add_subparsers(dest="command", required=True)

    minimize = subparsers.add_parser("minimize", help="CoNLL-2012 -> jsonlines (as minimize.py)")
    minimize.add_argument("input", help="a CoNLL-2012 file (*_gold_conll layout)")
    minimize.add_argument("output", help="the jsonlines file to write")
    minimize.add_argument(
        "--tokenizer",
        default="embedded:minilm",
        help="HF tokenizer: hub id (e.g. bert-base-cased), local folder, or embedded:minilm (default)",
    )
    minimize.add_argument("--seg-len", type=int, default=384, help="max_segment_len (default 384)")
    minimize.add_argument("--min-columns", type=int, default=12, help="columns a row needs (default 12)")
    minimize.add_argument("--skip-bad-documents", action="store_true", help="report and skip bad documents")
    minimize.add_argument("--no-tokens", action="store_true", help="omit the 'tokens' field (as minimize.py)")
    minimize.set_defaults(func=_minimize)

    stats = subparsers.add_parser("conll-stats", help="documents, sentences, words, mentions, entities, ...")
    stats.add_argument("files", nargs="+", help="CoNLL-2012 files")
    stats.add_argument("--min-columns", type=int, default=12, help="columns a row needs (default 12)")
    stats.add_argument("--skip-bad-documents", action="store_true", help="report and skip bad documents")
    stats.add_argument("--json", action="store_true", help="print JSON")
    stats.set_defaults(func=_conll_stats)

    predict = subparsers.add_parser(
        "predict",
        help="clusters for raw text, sentence records or jsonlines",
        description=(
            'INPUT: a .txt file (one document); a .jsonl of {"text": ...} or {"sentences": [[...]], '
            '"speakers": ...} records (optional "genre", "doc_key"); or Joshi-format jsonlines. '
            "OUTPUT: jsonlines, one record per document: for text and sentence records the words, sentences, "
            "clusters as word spans (inclusive), char_clusters as character spans into the text (end "
            "exclusive) and mention_strings; for Joshi-format input the document with predicted_clusters "
            "(subtoken spans)."
        ),
    )
    predict.add_argument("--model", required=True, help="a model directory (data/06_models/incremental)")
    predict.add_argument("input", help="a .txt file, or a .jsonl / .jsonlines file")
    predict.add_argument("output", help="the jsonlines file to write")
    predict.add_argument("--conll", help="also write the predictions as a CoNLL-2012 file here")
    predict.add_argument(
        "--gold-conll", help="Joshi-format input: the CoNLL-2012 file it came from; --conll then follows its layout"
    )
    predict.add_argument("--html", help="also write an HTML view colouring each cluster's mentions here")
    predict.add_argument("--genre", default="nw", help="genre of text records without one (default nw)")
    predict.add_argument(
        "--max-subtokens",
        type=int,
        help="the baseline's length limit (default: the model's max_inference_subtokens, 30000)",
    )
    predict.set_defaults(func=_predict)

    hocon = subparsers.add_parser("import-hocon", help="an experiments.conf entry as a coref_train preset")
    hocon.add_argument("conf", help="the original experiments.conf (HOCON)")
    hocon.add_argument("name", help="the experiment, e.g. spanbert_large")
    hocon.add_argument("--output", help="write the YAML here instead of printing it")
    hocon.set_defaults(func=_import_hocon)

    _add_optional_commands(subparsers)
    return parser


def _add_optional_commands(subparsers: argparse._SubParsersAction) -> None:
    """Subcommands defined next to the code they drive."""
    from coref_pipeline.evaluation.cli import add_score_parser

    add_score_parser(subparsers)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``coref-pipeline`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    sys.exit(args.func(args))
