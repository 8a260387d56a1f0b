"""``coref-pipeline predict``: clusters for raw text, sentence records or Joshi-format jsonlines."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from coref_pipeline.cli import CommandError

logger = logging.getLogger(__name__)

DESCRIPTION = (
    "INPUT: a .txt file (one document); a folder of .txt files (each a document named by its file); "
    'a .jsonl of {"text": ...} or {"sentences": [[...]], '
    '"speakers": ...} records (optional "genre", "doc_key"); or Joshi-format jsonlines. '
    "OUTPUT: jsonlines, one record per document: for text and sentence records the words, sentences, "
    "clusters as word spans (inclusive), char_clusters as character spans into the text (end "
    "exclusive) and mention_strings; for Joshi-format input the document with predicted_clusters "
    "(subtoken spans). Joshi-format input must have been segmented with the model's tokenizer: "
    "checked against the record minimize and segment write beside it (NAME.segmentation.json), "
    "else against the model's vocabulary. Many documents are predicted at once: grouped by length, the segments "
    "of a group read by the encoder together (--batch-tokens): in fp32 the clusters of one at a time, in bf16 "
    "not always (docs/api.md)."
)


@click.command("predict", short_help="clusters for raw text, sentence records or jsonlines", help=DESCRIPTION)
@click.option(
    "--model",
    "model_dir",
    required=True,
    help="a model directory (data/06_models/incremental), or a Hugging Face Hub model id (owner/name)",
)
@click.option("--revision", help="with a Hub model id: the branch, tag or commit to load (default: main)")
@click.argument("input_path", metavar="INPUT")
@click.argument("output_path", metavar="OUTPUT")
@click.option("--conll", help="also write the predictions as a CoNLL-2012 file here")
@click.option(
    "--gold-conll", help="Joshi-format input: the CoNLL-2012 file it came from; --conll then follows its layout"
)
@click.option("--html", help="also write an HTML view colouring each cluster's mentions here")
@click.option("--genre", help="genre of text records without one (default nw)")
@click.option(
    "--max-subtokens",
    type=int,
    help="the baseline's length limit (default: the model's max_inference_subtokens, 30000)",
)
@click.option(
    "--max-antecedents",
    type=click.IntRange(min=1),
    help="baseline: antecedents per span scored by the fine FFNN (default: the model's max_top_antecedents: 50, "
    "or 25 for cpu_minilm's fp32 head); fewer is faster",
)
@click.option(
    "--min-coarse-score",
    type=float,
    help="antecedents (the incremental model's columns) whose coarse score is at most this are not scored by the "
    "fine FFNN (default: the model's setting); fewer fine pairs is faster (docs/benchmarks.md measures the trade-off)",
)
@click.option(
    "--batch-tokens",
    type=click.IntRange(min=0),
    default=None,
    help="subtokens the encoder reads in one pass over the segments of several documents; 0 reads one document "
    "at a time (in fp32 the same clusters either way but for float32's near ties; default: 8192 on a GPU, 512 on a "
    "CPU, where short documents grouped measured faster: docs/benchmarks.md)",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="processes that predict on a CPU, one thread each, forked from the one that loaded the model and writes "
    "the output in order; on a 2-core CPU 2 read 1.3-1.4x the documents/s of one over many short texts "
    "(docs/benchmarks.md)",
)
@click.option(
    "--device",
    default="auto",
    show_default=True,
    help="where the model runs: auto (a GPU when there is one), cpu, cuda, cuda:N or mps",
)
@click.option(
    "--precision",
    type=click.Choice(["auto", "32", "bf16-mixed", "16-mixed"]),
    default="auto",
    show_default=True,
    help="inference precision: auto takes bf16-mixed where the device computes bf16 natively (a GPU with bf16, "
    "a CPU with AMX or AVX-512 BF16: there the encoder and the antecedent scorers in bf16, the mention scorer in "
    "fp32), else 32; 32 gives the exact fp32 results. What ran is recorded in OUTPUT's NAME.prediction.json",
)
def predict(
    model_dir: str,
    revision: str | None,
    input_path: str,
    output_path: str,
    conll: str | None,
    gold_conll: str | None,
    html: str | None,
    genre: str | None,
    max_subtokens: int | None,
    max_antecedents: int | None,
    min_coarse_score: float | None,
    batch_tokens: int | None,
    workers: int,
    device: str,
    precision: str,
) -> None:
    from coref_pipeline.files import ResumableJsonLines
    from coref_pipeline.formats.conll import DEFAULT_GENRE
    from coref_pipeline.serving.results import result_from_record

    if gold_conll and not conll:
        raise CommandError("--gold-conll needs --conll (the response file to write)")
    inputs = _read_inputs(input_path)
    joshi = inputs.kind == "jsonlines"
    if not joshi and gold_conll:
        raise CommandError("--gold-conll is for Joshi-format input (text has no gold file)")
    needs_words = bool(html or (conll and not gold_conll))
    if joshi and needs_words and inputs.without_tokens:
        raise CommandError(
            f"{input_path}: documents without the 'tokens' field (the words), needed for --html "
            f"and for --conll without --gold-conll: {inputs.without_tokens}"
        )

    model, directory = _load_model(
        model_dir, max_subtokens, device, precision, max_antecedents, min_coarse_score, revision
    )
    logger.info("Predicting with the %s model in %s", model.model_type, model.computation)
    try:
        if joshi:
            _check_segmentation(model, inputs.records(), input_path)
        settings = _output_settings(input_path, model_dir, revision, directory, model, genre, batch_tokens, workers)
        with ResumableJsonLines(output_path, settings) as output:
            _predict_into(output, model, inputs, joshi, genre or DEFAULT_GENRE, batch_tokens, workers)
            # OUTPUT, its record, --conll and --html are written once every document is predicted, or none of them.
            outputs = list(output.records()) if conll or html else []
            if joshi:
                results = _results_of_jsonlines(outputs) if needs_words else []
            else:
                results = [result_from_record(record) for record in outputs]
            conll_text = _conll_text(outputs, results, gold_conll) if conll else None
            output.commit()
    except (OSError, ValueError, KeyError) as error:  # DocumentTooLongError, SegmentationError, ...: ValueErrors
        raise CommandError(error) from None
    logger.info("Wrote %d document%s to %s", inputs.count, "" if inputs.count == 1 else "s", output_path)

    try:
        _write_record(output_path, model_dir, revision, model, inputs.count)
        if conll_text is not None:
            from coref_pipeline.files import atomic_write_text

            atomic_write_text(conll, conll_text)
            logger.info("Wrote CoNLL-2012 predictions to %s", conll)
        if html:
            from coref_pipeline.serving.visualize import HtmlView

            HtmlView(results, title=f"coref-pipeline predict: {Path(input_path).name}").save(html)
            logger.info("Wrote the HTML view to %s", html)
    except OSError as error:
        raise CommandError(error) from None


def _predict_into(
    output: Any, model: Any, inputs: Any, joshi: bool, genre: str, batch_tokens: int | None, workers: int
) -> None:
    """Predict the documents ``output`` does not hold yet (a killed run's are kept), read from the input as they are
    predicted and each written as it is done (by this process, in order, with ``workers`` processes predicting);
    an error names how many are kept for the same command to go on after."""
    if output.done:
        logger.info(
            "Going on from a run before: %d of %d documents predicted in %s", output.done, inputs.count, output.partial
        )
    remaining, total = inputs.records(output.done), inputs.count - output.done
    from coref_pipeline.serving.workers import output_records, predicted_in_processes

    workers = min(workers, total)
    if workers > 1:
        logger.info("Predicting in %d processes of one thread each", workers)
        predicted = predicted_in_processes(model, remaining, total, workers, joshi, genre, batch_tokens)
    else:
        predicted = output_records(model, remaining, joshi, genre, batch_tokens, total=total)
    written = output.done
    try:
        for record in predicted:
            output.write(record)
            written += 1
    except (ValueError, KeyError) as error:
        if not written:
            raise
        raise CommandError(
            f"{error} (the {written} documents before it are kept in {output.partial}: a run with the same input, "
            "model and options goes on after them, --max-subtokens aside)"
        ) from None


def _output_settings(
    input_path: str,
    model_dir: str,
    revision: str | None,
    directory: Path,
    model: Any,
    genre: str | None,
    batch_tokens: int | None,
    workers: int,
) -> dict[str, Any]:
    """What decides the records of OUTPUT, so that a killed run's are kept only for the same: the input as it is on
    disk, the model (the weights file as it is in ``directory``, where it was loaded from: for a Hub model, the
    snapshot its revision resolved to, whose path names the commit), how it was loaded and computes, the genre, the
    batch budget and the workers (both decide the groups, whose bf16 arithmetic differs). Not the baseline's length
    limit, which refuses a document and changes none it predicts."""
    return {
        "input": _files_state(Path(input_path)),
        "model": model_dir,
        "revision": revision,
        "weights": _files_state(directory / "model.safetensors"),
        "loaded": {key: getattr(model, key, None) for key in ("model_type", "precision", "computation")},
        "config": {key: value for key, value in model.config.to_dict().items() if key != "max_inference_subtokens"},
        "device": str(model.device),
        "genre": genre,
        "batch_tokens": batch_tokens,
        "workers": workers,
    }


def _files_state(path: Path) -> list[Any]:
    """A file's (or a folder's files') names, sizes and modification times; [] where there is none."""
    files = sorted(path.glob("*.txt")) if path.is_dir() else [path] if path.is_file() else []
    return [[str(file.resolve()), file.stat().st_size, file.stat().st_mtime_ns] for file in files]


def prediction_record_path(output_path: str | Path) -> Path:
    """Where ``predict`` records what computed OUTPUT: ``NAME.prediction.json`` beside it."""
    from coref_pipeline.files import record_beside

    return record_beside(output_path, "prediction")


def _write_record(output_path: str, model_dir: str, revision: str | None, model: Any, documents: int) -> None:
    """What computed the output, beside it: the model, its type, the precision as resolved and what it computes in,
    the device and torch's version (the output itself stays the records alone)."""
    import torch

    from coref_pipeline.files import atomic_write_json

    record = {
        "model": model_dir,
        "revision": revision,
        "model_type": model.model_type,
        "precision": model.precision,
        "computation": model.computation,
        "device": str(model.device),
        "torch": torch.__version__,
        "documents": documents,
    }
    atomic_write_json(record, prediction_record_path(output_path))


def _read_inputs(input_path: str) -> Any:
    """The documents of INPUT, read before the model is loaded (loading takes seconds)."""
    from coref_pipeline.serving.inputs import read_predict_inputs

    try:
        inputs = read_predict_inputs(input_path)
    except UnicodeDecodeError:
        raise CommandError(f"{input_path}: not a UTF-8 text file (a binary file?)") from None
    except (OSError, ValueError) as error:  # InputFormatError is a ValueError
        raise CommandError(error) from None
    if not inputs.count:
        raise CommandError(f"{input_path}: no documents")
    return inputs


def _load_model(
    model_dir: str,
    max_subtokens: int | None,
    device: str,
    precision: str,
    max_antecedents: int | None = None,
    min_coarse_score: float | None = None,
    revision: str | None = None,
) -> tuple[Any, Path]:
    """The model and the local folder it was loaded from (a Hub id resolved once, to its snapshot at ``revision``)."""
    from coref_pipeline.models.directory import resolve_model_directory
    from coref_pipeline.serving.coref_model import CorefModel

    try:
        directory = resolve_model_directory(model_dir, revision)
        model = CorefModel.load(
            directory,
            max_inference_subtokens=max_subtokens,
            device=device,
            precision=precision,
            max_top_antecedents=max_antecedents,
            min_coarse_score=min_coarse_score,
            for_prediction=True,
        )
    except (OSError, ValueError, KeyError) as error:  # ConfigError is a ValueError
        raise CommandError(error) from None
    return model, directory


def _check_segmentation(model: Any, documents: list[dict[str, Any]], input_path: str) -> None:
    """Refuse documents segmented with another tokenizer than the model's (the record beside them, if any)."""
    from coref_pipeline.formats.segmentation import SegmentationRecord, sidecar_path

    sidecar = sidecar_path(input_path)
    try:
        record = SegmentationRecord.load(sidecar) if sidecar.is_file() else None
    except (OSError, ValueError) as error:  # not JSON, or not a record
        raise CommandError(f"{sidecar}: {error}") from None
    model.check_segmentation(documents, record, str(input_path))  # SegmentationMismatchError: a ValueError


def _results_of_jsonlines(outputs: list[dict[str, Any]]) -> list[Any]:
    from coref_pipeline.serving.results import result_from_jsonlines

    return [result_from_jsonlines(document) for document in outputs]


def _conll_text(outputs: list[dict[str, Any]], results: list[Any], gold_conll: str | None) -> str:
    """The CoNLL-2012 file to write: the gold file's layout with predicted clusters, or 12 columns from the words."""
    from coref_pipeline.formats.conll import ConllFile, format_conll_document, format_conll_response

    if gold_conll:
        from coref_pipeline.evaluation.predictions import word_clusters

        gold = ConllFile.read(gold_conll)
        clusters = {document["doc_key"]: word_clusters(document) for document in outputs}
        return format_conll_response(gold.text, clusters, gold.path)
    return "".join(format_conll_document(result.doc_key, result.sentences, result.clusters) for result in results)
