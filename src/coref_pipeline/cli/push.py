"""``coref-pipeline push``: a model directory and its card to the Hugging Face Hub."""

from __future__ import annotations

import click

from coref_pipeline.cli import CommandError

DESCRIPTION = (
    "Upload the model directory MODEL_DIR with its model card to the Hugging Face Hub model REPO_ID (owner/name; "
    "created if absent) in one commit: every file of the directory, and the card as README.md with REPO_ID written "
    "where it names the model. The card: --card, else MODEL_DIR/README.md; the evaluate pipeline writes one per "
    "model (data/08_reporting/model_card_baseline.md, ..._incremental.md). Logs in as `hf auth login` or HF_TOKEN "
    "say. Read it back with CorefModel.load(REPO_ID) or `coref-pipeline predict --model REPO_ID`."
)


@click.command("push", short_help="a model directory and its card to the Hugging Face Hub", help=DESCRIPTION)
@click.argument("model_dir")
@click.argument("repo_id")
@click.option("--card", help="the model card to upload as README.md (default: MODEL_DIR/README.md)")
@click.option("--revision", help="the branch to commit to, created from main if absent (default: main)")
@click.option("--private", is_flag=True, help="create the repository private (an existing one keeps its visibility)")
@click.option("--message", help="the commit message")
def push(
    model_dir: str, repo_id: str, card: str | None, revision: str | None, private: bool, message: str | None
) -> None:
    from coref_pipeline.models.directory import ModelDirectoryError
    from coref_pipeline.sharing.hub import PushError, push_model_directory

    try:
        url = push_model_directory(model_dir, repo_id, card, revision, private, message)
    except (PushError, ModelDirectoryError) as error:
        raise CommandError(error) from None
    click.echo(f"Pushed {model_dir} to {repo_id}: {url}")
