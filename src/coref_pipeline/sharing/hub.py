"""A model directory and its card shared on the Hugging Face Hub: ``coref-pipeline push``.

One commit holds every file of the directory and the card as ``README.md`` (the repository's id written where
the card names its placeholder, ``model_card.REPO_PLACEHOLDER``, and the training's wall time from the directory's
``training.json`` added to its training section), so a reader of the Hub never sees weights
without their card. ``CorefModel.load("owner/name")`` reads it back (``models.directory.resolve_model_directory``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from coref_pipeline.errors import UserError
from coref_pipeline.models.directory import HUB_ID, read_stored_config, read_training_record
from coref_pipeline.sharing.model_card import CARD, REPO_PLACEHOLDER, with_training_time

logger = logging.getLogger(__name__)


class PushError(UserError, ValueError):
    """A push that cannot be made: no card, not a model directory, a bad repository id, the Hub refusing it."""


def card_for(directory: Path, card: str | Path | None) -> Path:
    """The card to upload: ``card``, else the directory's own ``README.md``; without one, one line saying where
    the ``evaluate`` pipeline writes them."""
    path = Path(card) if card is not None else directory / CARD
    if not path.is_file():
        if card is not None:
            raise PushError(f"model card not found: {path}")
        raise PushError(
            f"{directory} has no model card ({CARD}): name one with --card, e.g. "
            "data/08_reporting/model_card_baseline.md, which `kedro run --pipelines=evaluate` writes"
        )
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---\n") or "\n---\n" not in text[4:]:
        raise PushError(f"{path} is not a model card: it has no YAML metadata between '---' lines at its top")
    return path


def commit_operations(directory: Path, card_text: str) -> list[Any]:
    """``huggingface_hub`` commit operations: every file of ``directory`` (its own README.md replaced by
    ``card_text``) at its relative path."""
    from huggingface_hub import CommitOperationAdd

    files = sorted(
        path for path in directory.rglob("*") if path.is_file() and path.relative_to(directory).as_posix() != CARD
    )
    operations = [
        CommitOperationAdd(path_in_repo=path.relative_to(directory).as_posix(), path_or_fileobj=str(path))
        for path in files
    ]
    operations.append(CommitOperationAdd(path_in_repo=CARD, path_or_fileobj=card_text.encode("utf-8")))
    return operations


def push_model_directory(
    directory: str | Path,
    repo_id: str,
    card: str | Path | None = None,
    revision: str | None = None,
    private: bool = False,
    commit_message: str | None = None,
    api: Any = None,
) -> str:
    """Upload the model ``directory`` with its ``card`` (default: its own README.md) to the Hub model
    ``repo_id`` (created if absent, ``private`` then) in one commit, on branch ``revision`` (created from main
    if absent; None: main). ``api``: a ``huggingface_hub.HfApi`` (default: one with the token of ``hf auth
    login`` or ``HF_TOKEN``). Returns the commit's URL."""
    directory = Path(directory)
    read_stored_config(directory)  # a model directory, or one line saying it is not
    if not HUB_ID.fullmatch(repo_id):
        raise PushError(f"{repo_id!r} is not a Hub model id (owner/name)")
    card_text = card_for(directory, card).read_text(encoding="utf-8").replace(REPO_PLACEHOLDER, repo_id)
    card_text = with_training_time(card_text, read_training_record(directory))
    operations = commit_operations(directory, card_text)
    from huggingface_hub import HfApi

    api = api if api is not None else HfApi()
    message = commit_message or f"Upload {directory.name} (coref-pipeline)"
    try:
        api.create_repo(repo_id=repo_id, repo_type="model", private=private, exist_ok=True)
        if revision is not None:
            api.create_branch(repo_id=repo_id, branch=revision, repo_type="model", exist_ok=True)
        commit = api.create_commit(
            repo_id=repo_id, repo_type="model", operations=operations, commit_message=message, revision=revision
        )
    except Exception as error:  # the Hub's refusals, its HTTP library's network errors, a token file unread
        reason = " ".join(str(error).split()) or type(error).__name__
        raise PushError(
            f"push of {directory} to {repo_id} failed: {reason} (log in with `hf auth login` or set HF_TOKEN; "
            "the Hub must be reachable)"
        ) from error
    logger.info("Pushed %s (%d files and its card) to %s", directory, len(operations) - 1, repo_id)
    return str(commit.commit_url)
