"""A user's error through `kedro run`: one line on stderr naming the file, line or key, exit non-zero,
earlier outputs untouched; a programming error keeps its traceback."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import PROJECT_ROOT, SAMPLE_CONF, copy_project

pytestmark = pytest.mark.slow

SPLITS = ("train", "dev", "test")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of the project that has run preprocess and segment once (the outputs to keep)."""
    root = copy_project(tmp_path_factory.mktemp("errors"))
    result = kedro(root, "run", "--pipelines=preprocess,segment")
    assert result.returncode == 0, result.stderr[-3000:]
    return root


def kedro(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "kedro", *args]
    return subprocess.run(
        command, cwd=root, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})}
    )


def kedro_refused(root: Path, code: int, folder: str, *args: str) -> subprocess.CompletedProcess:
    """``kedro`` with the operating system refusing writes under ``folder`` (tests/os_refusal.py: EACCES, ENOSPC)."""
    command = [sys.executable, str(PROJECT_ROOT / "tests" / "os_refusal.py"), str(code), folder, *args]
    return subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=600, env={**os.environ})


def offline(tmp_path: Path) -> dict[str, str]:
    """No hub and an empty Hugging Face cache: what a user without a network who never downloaded anything has."""
    return {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")}


def outputs(root: Path) -> dict[str, str]:
    """Hash of every file the earlier run wrote."""
    found = {}
    for folder in ("data/02_intermediate", "data/03_primary"):
        for path in sorted((root / folder).rglob("*")):
            if path.is_file():
                found[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def use_corpus(root: Path, corpus: Path | None) -> None:
    """Point the catalog at ``corpus`` (a folder with the three files) through conf/local/globals.yml."""
    local = root / "conf" / "local" / "globals.yml"
    if corpus is None:  # back to the copy's own: the sample (tests.paths.copy_project)
        local.write_text((SAMPLE_CONF / "globals.yml").read_text())
        return
    files = "".join(f"  {split}: {split}.english.v4_gold_conll\n" for split in SPLITS)
    local.write_text(f"corpus:\n  dir: {corpus}\n{files}")


def corpus_with(tmp_path: Path, change) -> Path:
    corpus = tmp_path / "corpus"
    shutil.copytree(PROJECT_ROOT / "data" / "01_raw" / "sample", corpus)
    change(corpus / "train.english.v4_gold_conll")
    return corpus


def truncate(path: Path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[: len(lines) // 2]))


def unbalance(path: Path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if line.rstrip().endswith(")") and "(" not in line.split()[-1])
    columns = lines[index].rstrip("\n").split()
    lines[index] = "\t".join([*columns[:-1], "-"]) + "\n"
    path.write_text("".join(lines))
    unbalance.line = index + 1


def with_byte_order_mark(path: Path) -> None:
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())


def binary(path: Path) -> None:
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")


CORPUS_CASES = {
    "truncated": (truncate, r"train.english.v4_gold_conll", "has no '#end document'"),
    "unbalanced": (unbalance, r"train.english.v4_gold_conll:", "unbalanced coreference brackets"),
    "binary": (binary, r"train.english.v4_gold_conll:1", "not a UTF-8 text file"),
    "missing": (
        lambda path: path.unlink(),
        "raw_train",
        "no such file (the corpus is named in conf/local/globals.yml)",
    ),
    "empty": (lambda path: path.write_text(""), "train.english.v4_gold_conll", "no documents (an empty file?)"),
}


def assert_one_line(result: subprocess.CompletedProcess, *parts: str) -> None:
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[-1].startswith("error: "), lines[-1]
    for part in parts:
        assert part in lines[-1], (part, lines[-1])


@pytest.mark.parametrize("case", sorted(CORPUS_CASES))
def test_a_bad_corpus_file_is_one_line_and_nothing_is_overwritten(project, tmp_path, case):
    change, where, fault = CORPUS_CASES[case]
    before = outputs(project)
    use_corpus(project, corpus_with(tmp_path, change))
    try:
        result = kedro(project, "run", "--pipelines=preprocess,segment")
    finally:
        use_corpus(project, None)
    assert_one_line(result, where, fault)
    assert outputs(project) == before


PARAMETER_CASES = {
    "preprocess.min_columns=twelve": ("preprocess", "preprocess key 'min_columns': 'twelve' is not an integer"),
    "preprocess.min_colums=3": ("preprocess", "unknown preprocess key(s) ['min_colums']"),
    "segment.max_segment_lens=abc": ("segment", "segment key 'max_segment_lens': 'abc' is not a list of integers"),
    "segment.tokeniser=bert": ("segment", "unknown segment key(s) ['tokeniser']"),
    "coref_train.overrides.num_epochs=abc": ("segment", "training key 'num_epochs': 'abc' is not an integer"),
    "coref_train.overrides.num_epochs=-1": ("segment", "training key 'num_epochs' must be at least 1, got -1"),
    "coref_train.overrides.top_span_ratio=0": ("segment", "model key 'top_span_ratio' must be greater than 0, got 0"),
    "coref_train.overrides.ffnn_sise=3": ("segment", "unknown coref_train key(s) ['ffnn_sise']"),
    "incremental_train.overrides.patience=soon": (
        "incremental_train",
        "training key 'patience': 'soon' is not an integer or null",
    ),
}


@pytest.mark.parametrize("override", sorted(PARAMETER_CASES))
def test_a_bad_parameter_is_one_line_naming_the_key(project, override):
    pipeline, message = PARAMETER_CASES[override]
    before = outputs(project)
    result = kedro(project, "run", f"--pipelines={pipeline}", "--params", override)
    if pipeline == "incremental_train":  # no baseline yet: the prerequisite is named first, also in one line
        assert_one_line(result, "baseline_model", "run `kedro run --pipelines=coref_train` first")
    else:
        assert_one_line(result, message)
    assert outputs(project) == before


def test_a_quoted_no_is_not_read_as_true(project):
    """`remove_singletons: "no"` in a parameters file is a string, refused before any training starts."""
    local = project / "conf" / "local" / "parameters_evaluate.yml"
    local.write_text('evaluate:\n  remove_singletons: "no"\n')
    try:
        result = kedro(project, "run", "--pipelines=coref_train")
    finally:
        local.write_text((SAMPLE_CONF / "parameters_evaluate.yml").read_text())
    assert_one_line(result, "evaluate key 'remove_singletons': 'no' is not true or false")
    assert not (project / "data" / "06_models" / "baseline_training").exists()


def test_verbose_shows_the_traceback(project):
    result = kedro(project, "run", "--pipelines=preprocess", "--params", "preprocess.min_columns=twelve", "--verbose")
    assert result.returncode != 0 and "Traceback" in result.stderr and "ConfigError" in result.stderr


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a CUDA GPU")
def test_a_gpu_that_is_not_there_is_one_line(project):
    before = outputs(project)
    result = kedro(project, "run", "--pipelines=coref_train", "--params", "coref_train.overrides.device=cuda")
    assert_one_line(result, "device 'cuda' was asked for", "sees no CUDA GPU", "use device cpu")
    assert outputs(project) == before


def test_a_corpus_file_with_a_byte_order_mark_reads_as_its_twin_without(project, tmp_path):
    """A UTF-8 BOM is accepted as CRLF line ends are: the same documents, byte for byte the same outputs."""
    before = outputs(project)
    use_corpus(project, corpus_with(tmp_path, with_byte_order_mark))
    try:
        result = kedro(project, "run", "--pipelines=preprocess,segment")
    finally:
        use_corpus(project, None)
    assert result.returncode == 0, result.stderr[-3000:]
    assert outputs(project) == before


def test_a_configuration_file_that_does_not_parse_is_one_line_with_its_line_and_column(project):
    before = outputs(project)
    local = project / "conf" / "local" / "parameters_coref_train.yml"
    local.write_text("coref_train:\n  overrides:\n    num_epochs: : 3\n")
    try:
        result = kedro(project, "run", "--pipelines=coref_train")
    finally:
        local.unlink()
    assert_one_line(
        result, "conf/local/parameters_coref_train.yml:3:17: not valid YAML: mapping values are not allowed"
    )
    assert outputs(project) == before


def test_a_corpus_path_that_is_a_directory_is_named_with_where_it_was_set(project, tmp_path):
    before = outputs(project)
    corpus = corpus_with(tmp_path, lambda path: None)
    (corpus / "train.english.v4_gold_conll").unlink()
    (corpus / "train.english.v4_gold_conll").mkdir()
    use_corpus(project, corpus)
    try:
        result = kedro(project, "run", "--pipelines=preprocess")
    finally:
        use_corpus(project, None)
    assert_one_line(
        result,
        "raw_train",
        "train.english.v4_gold_conll) is a directory, not a CoNLL file",
        "(the corpus is named in conf/local/globals.yml)",
    )
    assert outputs(project) == before


def test_a_tokenizer_mismatch_is_refused_offline_naming_both(project, tmp_path):
    """bert_base on data segmented for cpu_minilm, with no network and no cache: refused before any encoder loads."""
    before = outputs(project)
    result = kedro(
        project, "run", "--pipelines=coref_train", "--params", "coref_train.preset=bert_base", env=offline(tmp_path)
    )
    assert_one_line(
        result,
        "the documents were segmented with tokenizer 'embedded:minilm', the model uses 'bert-base-cased'",
        "re-segment them with `kedro run --pipelines=segment --params segment.tokenizer=bert-base-cased,",
    )
    assert outputs(project) == before
    assert not (project / "data" / "06_models" / "baseline").exists()
    assert not (project / "data" / "06_models" / "baseline_training").exists()


def test_a_tokenizer_neither_local_nor_reachable_says_how_to_get_it(project, tmp_path):
    before = outputs(project)
    result = kedro(
        project, "run", "--pipelines=segment", "--params", "segment.tokenizer=bert-base-cased", env=offline(tmp_path)
    )
    assert_one_line(
        result,
        "tokenizer 'bert-base-cased' is not a local folder, not in the Hugging Face cache, "
        "and the hub cannot be reached",
        "`hf download bert-base-cased`",
    )
    assert outputs(project) == before


def test_a_work_directory_without_write_permission_is_one_line(project):
    """Simulated (tests/os_refusal.py): a test running as root cannot make a folder it may not write."""
    before = outputs(project)
    result = kedro_refused(project, errno.EACCES, "data/06_models/baseline_training", "run", "--pipelines=coref_train")
    assert_one_line(result, "cannot write data/06_models/baseline_training", "permission denied")
    assert outputs(project) == before


def test_a_full_disk_is_one_line_and_leaves_the_earlier_outputs(project):
    """Simulated: each output file opens (truncated) and its first write fails. The earlier outputs survive
    because every output is written to a temporary file and renamed (AtomicDataset)."""
    before = outputs(project)
    result = kedro_refused(project, errno.ENOSPC, "data/02_intermediate", "run", "--pipelines=preprocess")
    assert_one_line(result, "cannot write data/02_intermediate/", "word_documents.parquet: no space left on the device")
    assert outputs(project) == before


def test_a_directory_in_the_way_of_an_output_is_one_line(project):
    before = outputs(project)
    target = project / "data" / "02_intermediate" / "dev.word_documents.parquet"
    saved = target.read_bytes()
    target.unlink()
    target.mkdir()
    try:
        result = kedro(project, "run", "--pipelines=preprocess")
    finally:
        target.rmdir()
        target.write_bytes(saved)
    assert_one_line(result, "cannot write data/02_intermediate/dev.word_documents.parquet: a directory is in the way")
    assert outputs(project) == before
