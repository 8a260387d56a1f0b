"""The main job's corpus, LitBank fold 0 in data/01_raw/litbank: the copy the tests and benchmarks read, and its
licence."""

from __future__ import annotations

import gzip

import pytest

from coref_pipeline.formats.conll import read_conll
from tests.paths import PROJECT_ROOT

CORPUS = PROJECT_ROOT / "data" / "01_raw" / "litbank"
SPLITS = {"train": 80, "dev": 10, "test": 10}


@pytest.mark.parametrize("split", sorted(SPLITS))
def test_the_committed_litbank_is_the_shared_copy_line_for_line(split, litbank_dir):
    committed = gzip.decompress((CORPUS / f"{split}.conll.gz").read_bytes())
    assert committed == (litbank_dir / f"{split}.conll").read_bytes()


@pytest.mark.parametrize("split", sorted(SPLITS))
def test_each_split_reads_as_fold_0(split):
    documents = read_conll(CORPUS / f"{split}.conll.gz")
    assert len(documents) == SPLITS[split]
    assert all(len(document.clusters) > 0 for document in documents)


def test_the_corpus_carries_its_licence_and_attribution():
    licence = (CORPUS / "LICENSE").read_text()
    assert "Creative Commons Attribution 4.0" in licence and "Bamman" in licence
    readme = (CORPUS / "README.md").read_text()
    assert "CC BY 4.0" in readme and "github.com/dbamman/litbank" in readme


def test_the_main_job_reads_litbank_and_scores_it_without_singletons():
    import yaml

    conf = PROJECT_ROOT / "conf" / "base"
    corpus = yaml.safe_load((conf / "globals.yml").read_text())["corpus"]
    assert corpus["dir"] == "data/01_raw/litbank"
    for split in SPLITS:
        assert (PROJECT_ROOT / corpus["dir"] / corpus[split]).is_file()
    assert yaml.safe_load((conf / "parameters_evaluate.yml").read_text())["evaluate"]["remove_singletons"] is True
