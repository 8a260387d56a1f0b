"""``coref-pipeline import-tf-checkpoint``: a released TensorFlow model of the original as a model directory."""

from __future__ import annotations

from pathlib import Path

import click

from coref_pipeline.cli import CommandError

DESCRIPTION = (
    "A TensorFlow checkpoint of the original BERT coreference model (Joshi et al.'s released bert_base, "
    "spanbert_base, bert_large, spanbert_large, or one trained with their code) as a baseline model directory. "
    "CHECKPOINT_DIR holds model.max.ckpt.index and .data-00000-of-00001 (or the checkpoint its 'checkpoint' file "
    "names), bert_config.json, vocab.txt and experiments.conf. OUT_MODEL_DIR: a new directory (or a model "
    "directory to replace), written whole or not at all, with a model card (README.md); CorefModel.load, "
    "predict, evaluate, coref_train (init_from, take_from) and so incremental_train read it. TensorFlow is not "
    "needed."
)


@click.command("import-tf-checkpoint", short_help="a released TF model as a model directory", help=DESCRIPTION)
@click.argument("checkpoint_dir")
@click.argument("out_model_dir")
@click.option(
    "--preset",
    help="the experiments.conf entry the checkpoint was trained with (default: the one named as CHECKPOINT_DIR, "
    "e.g. spanbert_base)",
)
@click.option(
    "--optimizer-state",
    is_flag=True,
    help="also import the optimiser's state (the Adam slots, global_step): coref_train with init_from OUT_MODEL_DIR "
    "and optimiser: original continues from the checkpoint's step at the original's learning rates",
)
def import_tf_checkpoint(checkpoint_dir: str, out_model_dir: str, preset: str | None, optimizer_state: bool) -> None:
    from coref_pipeline.models.directory import TOKENIZER
    from coref_pipeline.original.tf_import import TFImportError
    from coref_pipeline.original.tf_import import import_tf_checkpoint as run_import

    try:
        summary = run_import(checkpoint_dir, out_model_dir, preset, optimiser_state=optimizer_state)
    except (TFImportError, OSError) as error:
        raise CommandError(error) from None
    write_imported_card(Path(out_model_dir), summary.experiment, Path(summary.checkpoint).name)
    click.echo(f"Wrote {out_model_dir} (with its model card, README.md): {summary.describe()}.")
    click.echo(
        f"Segment text for it with its own tokenizer: coref-pipeline minimize INPUT.conll OUTPUT.jsonlines "
        f"--tokenizer {Path(out_model_dir) / TOKENIZER} --seg-len {summary.segment_length}"
    )


def write_imported_card(directory: Path, experiment: str, checkpoint: str, origin: str | None = None) -> None:
    """The imported model's card (no scores: this project has not scored it yet) as the directory's README.md;
    ``origin`` says where it came from (default: a checkpoint of Joshi et al.'s code)."""
    from coref_pipeline.files import atomic_write_text
    from coref_pipeline.models.directory import read_stored_config
    from coref_pipeline.sharing.model_card import CARD, ModelCardSettings, model_card

    stored = read_stored_config(directory)
    origin = origin or (
        f"Trained by the original code of Joshi et al. (experiment `{experiment}` of its experiments.conf; the "
        "released models on CoNLL-2012 English, OntoNotes 5.0) and imported from its TensorFlow checkpoint "
        f"`{checkpoint}` by `coref-pipeline import-tf-checkpoint`."
    )
    card = model_card(
        stored["model_type"],
        stored["model"],
        None,
        settings=ModelCardSettings(corpus="conll2012"),
        title=experiment,
        origin=origin,
    )
    atomic_write_text(directory / CARD, card)
