"""Shared fixtures: the project's paths, the shared corpora, the embedded tokenizer, oneDNN's cache variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.paths import SHARED_DIR


@pytest.fixture(scope="session")
def litbank_dir() -> Path:
    """``../shared/corpora/litbank``; tests using it skip when it is absent."""
    path = SHARED_DIR / "corpora" / "litbank"
    if not (path / "train.conll").is_file():
        pytest.skip(f"shared LitBank corpus not found at {path} (../shared beside the project)")
    return path


@pytest.fixture(scope="session")
def minilm_tokenizer():
    """The packaged MiniLM's fast tokenizer (uncased WordPiece), loaded offline."""
    from coref_pipeline.pretrained import load_tokenizer

    return load_tokenizer("embedded:minilm")


@pytest.fixture(scope="session")
def imported_tiny_coref(tmp_path_factory) -> Path:
    """The fixture checkpoint of the original model (tests/fixtures/tf_checkpoints/tiny_coref) imported."""
    from coref_pipeline.original.tf_import import import_tf_checkpoint
    from tests.released import TINY_CHECKPOINT

    directory = tmp_path_factory.mktemp("imported") / "tiny_coref"
    import_tf_checkpoint(TINY_CHECKPOINT, directory)
    return directory


@pytest.fixture
def onednn_caches_unset(monkeypatch):
    """oneDNN's cache variables absent during the test, as a user who leaves them to the project has them, and as
    they were after it: each set first, so that monkeypatch also removes a value the code under test sets."""
    from coref_pipeline.runtime.onednn import ONEDNN_CACHE_ENVIRONMENT

    for name in ONEDNN_CACHE_ENVIRONMENT:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
