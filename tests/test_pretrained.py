"""Where encoders and tokenizers come from, and the one line when one cannot be had."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from coref_pipeline.errors import UserError
from coref_pipeline.pretrained import (
    EMBEDDED_MINILM,
    PretrainedUnavailableError,
    embedded_minilm_path,
    load_pretrained,
    resolve_pretrained,
)


def test_the_embedded_minilm_and_local_folders_resolve_to_folders(tmp_path):
    assert resolve_pretrained(EMBEDDED_MINILM) == embedded_minilm_path()
    assert resolve_pretrained(str(tmp_path)) == str(tmp_path)
    assert resolve_pretrained("SpanBERT/spanbert-large-cased") == "SpanBERT/spanbert-large-cased"
    with pytest.raises(PretrainedUnavailableError, match="unknown embedded encoder 'embedded:bert'"):
        resolve_pretrained("embedded:bert")


def test_a_hub_id_that_cannot_be_had_names_it_and_how_to_get_it():
    def unreachable(name):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")

    with pytest.raises(PretrainedUnavailableError) as error:
        load_pretrained("SpanBERT/spanbert-large-cased", "encoder", unreachable)
    assert isinstance(error.value, UserError)
    assert str(error.value) == (
        "encoder 'SpanBERT/spanbert-large-cased' is not a local folder, not in the Hugging Face cache, and the hub "
        "cannot be reached: download it once where there is a network (`hf download SpanBERT/spanbert-large-cased`), "
        "or name a local folder that holds it"
    )


def test_a_local_folder_that_does_not_load_names_the_folder(tmp_path):
    def broken(name):
        raise OSError(f"{name} does not appear to have a file named config.json")

    with pytest.raises(PretrainedUnavailableError, match=f"encoder folder {tmp_path}: .*config.json"):
        load_pretrained(str(tmp_path), "encoder", broken)


def test_offline_with_an_empty_cache_the_tokenizer_is_refused_in_one_line(tmp_path):
    """The real transformers, no network, no cache: a user who never downloaded bert-base-cased."""
    script = textwrap.dedent(
        """
        from coref_pipeline.pretrained import load_tokenizer, PretrainedUnavailableError
        try:
            load_tokenizer("bert-base-cased")
        except PretrainedUnavailableError as error:
            print(error)
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert result.stdout.strip().startswith("tokenizer 'bert-base-cased' is not a local folder"), result
