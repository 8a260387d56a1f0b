"""``coref-pipeline import-icoref``: a checkpoint of Xia et al.'s 2020 incremental code as a model directory."""

from __future__ import annotations

from pathlib import Path

import click

from coref_pipeline.cli import CommandError
from coref_pipeline.cli.import_tf_checkpoint import write_imported_card

DESCRIPTION = (
    "A checkpoint of Xia, Sedoc and Van Durme's incremental coreference code (pitrack/incremental-coref, 2020: "
    "the released spb_on_512 checkpoint.bin, or one its trainer saved) as an incremental model directory. "
    "CHECKPOINT: the file the trainer saves (a dict holding model, optimizer and encoder_optimizer), read with "
    "torch.load(weights_only=True); a file holding pickled objects is refused. OUT_MODEL_DIR: a new directory (or "
    "a model directory to replace), written whole or not at all; CorefModel.load, predict, serve and evaluate read "
    "it, and it decides as the 2020 code does (docs/models/incremental.md). The weights, encoder's included, come "
    "from the checkpoint; the encoder's configuration and tokenizer from --encoder."
)


@click.command("import-icoref", short_help="a checkpoint of Xia et al.'s code as a model directory", help=DESCRIPTION)
@click.argument("checkpoint")
@click.argument("out_model_dir")
@click.option(
    "--encoder",
    required=True,
    help="a folder or a hub id giving the encoder's configuration and tokenizer, e.g. SpanBERT/spanbert-large-cased",
)
@click.option(
    "--experiment",
    default="spb_on_512",
    show_default=True,
    help="the experiment the checkpoint was trained as (its configuration's values)",
)
@click.option(
    "--experiments",
    type=click.Path(dir_okay=False),
    help="the authors' experiments.jsonnet (needs the jsonnet package) or the config.json their trainer wrote; "
    "default: the 2020 code's experiments, built in",
)
def import_icoref(checkpoint: str, out_model_dir: str, encoder: str, experiment: str, experiments: str | None) -> None:
    from coref_pipeline.original.icoref import ICorefImportError
    from coref_pipeline.original.icoref import import_icoref as run_import
    from coref_pipeline.pretrained import PretrainedUnavailableError

    try:
        summary = run_import(checkpoint, out_model_dir, encoder, experiment, experiments)
    except (ICorefImportError, PretrainedUnavailableError, OSError) as error:
        raise CommandError(error) from None
    origin = (
        f"Trained by the 2020 code of Xia, Sedoc and Van Durme (pitrack/incremental-coref, experiment "
        f"`{summary.experiment}`) and imported from its checkpoint `{Path(summary.checkpoint).name}` by "
        '`coref-pipeline import-icoref`; it decides as that code does (docs/models/incremental.md, "Differences '
        "from the authors' code\")."
    )
    write_imported_card(Path(out_model_dir), summary.experiment, Path(summary.checkpoint).name, origin)
    click.echo(f"Wrote {out_model_dir} (with its model card, README.md): {summary.describe()}.")
