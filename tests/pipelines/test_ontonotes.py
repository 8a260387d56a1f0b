"""The ontonotes pipeline: its source in the parameters -> the raw corpus preprocess reads; run by name only."""

from __future__ import annotations

import pytest

from coref_pipeline.config_base import ConfigError
from coref_pipeline.formats.conll import ConllFile
from coref_pipeline.formats.ontonotes import SPLITS
from coref_pipeline.pipeline_registry import NOT_IN_DEFAULT
from coref_pipeline.pipelines.ontonotes.nodes import ontonotes
from coref_pipeline.pipelines.ontonotes.pipeline import create_pipeline
from coref_pipeline.pipelines.preprocess.nodes import preprocess
from coref_pipeline.pipelines.segment.nodes import segment
from tests.formats.ontonotes_helpers import write_hub_parquet
from tests.formats.test_ontonotes import RELEASE, SKELETONS, expected
from tests.paths import PROJECT_ROOT

PREPROCESS = {"min_columns": 12, "skip_bad_documents": False, "genres": ["bc", "bn", "mz", "nw", "pt", "tc", "wb"]}
SEGMENT = {"tokenizer": "embedded:minilm", "max_segment_lens": [128], "language": "english", "include_tokens": True}
CHOSEN = {"preset": "small", "overrides": {}, "presets": {"small": {"max_segment_len": 128}}}
SAMPLE = PROJECT_ROOT / "data" / "01_raw" / "sample"


def test_the_node_writes_the_raw_corpus_from_the_release():
    files = ontonotes({"from_release": {"english": {"release": str(RELEASE), "skeletons": str(SKELETONS)}}})
    assert [file.text for file in files] == [expected(split) for split in SPLITS]
    with pytest.raises(ConfigError, match="no source"):
        ontonotes({"from_release": {}, "from_parquet": {}, "version": None, "test_partition": "test"})


def test_the_pipeline_writes_what_preprocess_reads_and_runs_by_name_only():
    pipeline = create_pipeline()
    assert pipeline.inputs() == {"params:ontonotes"}
    assert pipeline.outputs() == {"raw_train", "raw_dev", "raw_test"}
    assert "ontonotes" in NOT_IN_DEFAULT


def jsonlines(files: dict[str, ConllFile]) -> dict[str, list[dict]]:
    """What preprocess then segment make of the three files."""
    frames = {split: preprocess(files[split], PREPROCESS) for split in SPLITS}
    partitions, _ = segment(frames["train"], frames["dev"], frames["test"], SEGMENT, CHOSEN)
    return partitions


@pytest.mark.parametrize("corpus", ["fixtures", "sample"])
def test_the_hubs_parquet_gives_the_jsonlines_of_its_conll_file(tmp_path, corpus):
    """The Hub's export of a CoNLL-2012 corpus (its exact schema), through ontonotes, preprocess and segment,
    gives the jsonlines that the corpus's own files give."""
    if corpus == "sample":
        texts = {split: (SAMPLE / f"{split}.english.v4_gold_conll").read_text() for split in SPLITS}
    else:
        texts = {split: expected(split) for split in SPLITS}
    folder = write_hub_parquet(tmp_path, texts, layout="files")
    from_hub = dict(zip(SPLITS, ontonotes({"from_parquet": {"english": str(folder)}}), strict=True))
    direct = {split: ConllFile(f"{split}.conll", texts[split]) for split in SPLITS}
    expected_jsonlines = jsonlines(direct)
    assert jsonlines(from_hub) == expected_jsonlines
    assert sum(len(documents) for documents in expected_jsonlines.values()) >= 10


@pytest.mark.slow
def test_kedro_run_goes_from_the_release_to_the_word_level_documents(tmp_path):
    """`kedro run --pipelines=ontonotes,preprocess` in a copy of the project whose corpus folder is new: the
    raw files are written first, then read."""
    import os
    import subprocess
    import sys

    import pandas as pd
    import yaml

    from tests.paths import copy_project

    root = copy_project(tmp_path / "project", with_raw_data=False)
    source = {"english": {"release": str(RELEASE), "skeletons": str(SKELETONS)}}
    (root / "conf" / "local" / "parameters_ontonotes.yml").write_text(
        yaml.safe_dump({"ontonotes": {"from_release": source, "from_parquet": {}, "version": None}})
    )
    corpus = {"dir": "data/01_raw/ontonotes", **{split: f"{split}.english.v4_gold_conll" for split in SPLITS}}
    (root / "conf" / "local" / "globals.yml").write_text(yaml.safe_dump({"corpus": corpus}))
    command = [sys.executable, "-m", "kedro", "run", "--pipelines=ontonotes,preprocess"]
    result = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=600, env={**os.environ})
    assert result.returncode == 0, result.stderr[-3000:]
    for split in SPLITS:
        assert (root / corpus["dir"] / corpus[split]).read_text() == expected(split)
    frame = pd.read_parquet(root / "data" / "02_intermediate" / "dev.word_documents.parquet")
    assert frame["doc_key"].tolist() == ["mz/sinorama/10/ectb_1008_0", "wb/eng/00/eng_0007_0"]
