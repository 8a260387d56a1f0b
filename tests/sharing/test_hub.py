"""``coref-pipeline push``: up to the calls into ``huggingface_hub`` (no Hub is reachable here), their arguments."""

from __future__ import annotations

import json
from pathlib import Path

import huggingface_hub
import pytest

from coref_pipeline.models.config import BaselineConfig
from coref_pipeline.models.directory import ModelDirectoryError
from coref_pipeline.sharing.hub import PushError, push_model_directory
from coref_pipeline.sharing.model_card import REPO_PLACEHOLDER, model_card, with_training_time
from tests.cli.test_commands import one_error_line, run


class RecordingApi:
    """Stands for ``huggingface_hub.HfApi``: records each call; ``fail`` makes ``create_commit`` raise it."""

    calls: list[tuple[str, dict]] = []
    fail: Exception | None = None

    def __init__(self, **kwargs) -> None:
        RecordingApi.calls.append(("HfApi", kwargs))

    def create_repo(self, **kwargs):
        RecordingApi.calls.append(("create_repo", kwargs))

    def create_branch(self, **kwargs):
        RecordingApi.calls.append(("create_branch", kwargs))

    def create_commit(self, **kwargs):
        RecordingApi.calls.append(("create_commit", kwargs))
        if RecordingApi.fail is not None:
            raise RecordingApi.fail

        class Commit:
            commit_url = f"https://huggingface.co/{kwargs['repo_id']}/commit/0123abc"

        return Commit()


@pytest.fixture
def hub(monkeypatch):
    RecordingApi.calls, RecordingApi.fail = [], None
    monkeypatch.setattr(huggingface_hub, "HfApi", RecordingApi)
    return RecordingApi


RECORD = {"preset": "cpu_minilm", "steps": 3, "best_step": 3, "best_dev_conll_f1": 50.0, "train_minutes": 1.54}


@pytest.fixture
def model_dir(tmp_path) -> Path:
    """A model directory's files (their contents do not matter to a push) and a card written apart."""
    directory = tmp_path / "baseline"
    (directory / "tokenizer").mkdir(parents=True)
    (directory / "encoder").mkdir()
    config = BaselineConfig().to_dict()
    (directory / "coref_config.json").write_text(json.dumps({"model_type": "baseline", "model": config}))
    (directory / "model.safetensors").write_bytes(b"\x00weights")
    (directory / "encoder" / "config.json").write_text("{}")
    (directory / "tokenizer" / "vocab.txt").write_text("[PAD]\n")
    (directory / "training.json").write_text(json.dumps(RECORD))
    (tmp_path / "card.md").write_text(model_card("baseline", config, RECORD, {"test": {"conll_f1": 49.1367}}))
    return directory


def committed(hub) -> dict[str, bytes]:
    """What the commit holds: path in the repository -> content."""
    (call,) = [kwargs for name, kwargs in hub.calls if name == "create_commit"]
    files = {}
    for operation in call["operations"]:
        source = operation.path_or_fileobj
        files[operation.path_in_repo] = source if isinstance(source, bytes) else Path(source).read_bytes()
    return files


def test_push_commits_every_file_and_the_card_as_readme(hub, model_dir, capsys):
    card = model_dir.parent / "card.md"
    assert run(["push", str(model_dir), "someone/litbank-baseline", "--card", str(card)]) == 0
    printed = capsys.readouterr().out.splitlines()  # (with the library's log too, where logging goes to stdout)
    assert (
        f"Pushed {model_dir} to someone/litbank-baseline: https://huggingface.co/someone/litbank-baseline/commit/0123abc"
        in printed
    )
    names = [name for name, _ in hub.calls]
    assert names == ["HfApi", "create_repo", "create_commit"]  # no branch: main
    assert hub.calls[1][1] == {
        "repo_id": "someone/litbank-baseline",
        "repo_type": "model",
        "private": False,
        "exist_ok": True,
    }
    commit = hub.calls[2][1]
    assert (commit["repo_id"], commit["repo_type"], commit["revision"]) == ("someone/litbank-baseline", "model", None)
    assert commit["commit_message"] == "Upload baseline (coref-pipeline)"
    files = committed(hub)
    on_disk = {p.relative_to(model_dir).as_posix(): p.read_bytes() for p in model_dir.rglob("*") if p.is_file()}
    readme = files.pop("README.md").decode()
    assert files == on_disk  # every file of the directory, byte for byte, at its relative path
    # The card as written (no wall time: it is kept in git), with the repository's id and the training's time.
    assert "minutes" not in card.read_text()
    assert readme == with_training_time(card.read_text().replace(REPO_PLACEHOLDER, "someone/litbank-baseline"), RECORD)
    assert "- wall time: 1.54 minutes of training (from `training_time.json`)" in readme.splitlines()
    assert 'CorefModel.load("someone/litbank-baseline")' in readme and REPO_PLACEHOLDER not in readme


def test_the_directory_card_a_branch_privacy_and_message(hub, model_dir):
    (model_dir / "README.md").write_text((model_dir.parent / "card.md").read_text())
    url = push_model_directory(model_dir, "someone/m", revision="v1", private=True, commit_message="first")
    assert url.endswith("/commit/0123abc")
    names = [name for name, _ in hub.calls]
    assert names == ["HfApi", "create_repo", "create_branch", "create_commit"]
    assert hub.calls[1][1]["private"] is True
    assert hub.calls[2][1] == {"repo_id": "someone/m", "branch": "v1", "repo_type": "model", "exist_ok": True}
    assert (hub.calls[3][1]["revision"], hub.calls[3][1]["commit_message"]) == ("v1", "first")
    files = committed(hub)
    assert list(files).count("README.md") == 1 and b"someone/m" in files["README.md"]


def test_what_cannot_be_pushed_is_one_line_and_nothing_is_called(hub, model_dir, tmp_path, capsys):
    assert run(["push", str(model_dir), "someone/m"]) == 2  # no README.md and no --card
    one_error_line(capsys.readouterr().err, model_dir, "--card", "data/08_reporting/model_card_baseline.md")
    assert run(["push", str(model_dir), "someone/m", "--card", str(tmp_path / "none.md")]) == 2
    one_error_line(capsys.readouterr().err, "model card not found", tmp_path / "none.md")
    (tmp_path / "plain.md").write_text("# a model\n")
    assert run(["push", str(model_dir), "someone/m", "--card", str(tmp_path / "plain.md")]) == 2
    one_error_line(capsys.readouterr().err, tmp_path / "plain.md", "YAML metadata")
    assert run(["push", str(model_dir), "not an id", "--card", str(tmp_path / "card.md")]) == 2
    one_error_line(capsys.readouterr().err, "'not an id' is not a Hub model id")
    assert run(["push", str(tmp_path), "someone/m", "--card", str(tmp_path / "card.md")]) == 2
    one_error_line(capsys.readouterr().err, tmp_path, "coref_config.json")
    assert hub.calls == []
    with pytest.raises(ModelDirectoryError):
        push_model_directory(tmp_path / "absent", "someone/m")


def test_a_refusal_of_the_hub_is_one_line(hub, model_dir, capsys):
    hub.fail = OSError("401 Unauthorized: invalid token")
    assert run(["push", str(model_dir), "someone/m", "--card", str(model_dir.parent / "card.md")]) == 2
    one_error_line(capsys.readouterr().err, "someone/m", "401 Unauthorized", "hf auth login")
    with pytest.raises(PushError, match="401"):
        push_model_directory(model_dir, "someone/m", model_dir.parent / "card.md")
