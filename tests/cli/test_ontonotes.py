"""``coref-pipeline ontonotes``: the release (or the Hub's Parquet) -> the three CoNLL-2012 files, or one error line."""

from __future__ import annotations

import shutil

import pytest

from coref_pipeline.formats.ontonotes import SPLITS
from tests.cli.test_commands import one_error_line, run
from tests.formats.ontonotes_helpers import write_hub_parquet
from tests.formats.test_ontonotes import RELEASE, SKELETONS, V12_TREE, expected


def written(folder, language="english", version="v4") -> dict[str, str]:
    return {split: (folder / f"{split}.{language}.{version}_gold_conll").read_text() for split in SPLITS}


def test_the_release_and_the_skeletons(tmp_path, capsys):
    out = tmp_path / "ontonotes"
    assert run(["ontonotes", "--release", str(RELEASE), "--skeletons", str(SKELETONS), str(out), "--no-progress"]) == 0
    assert written(out) == {split: expected(split) for split in SPLITS}
    assert capsys.readouterr().out.split() == [str(out / f"{split}.english.v4_gold_conll") for split in SPLITS]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ontonotes"]


def test_the_v12_tree_and_chinese(tmp_path):
    assert run(["ontonotes", "--release", str(RELEASE), "--skeletons", str(V12_TREE), str(tmp_path / "v12")]) == 0
    assert written(tmp_path / "v12", version="v12") == {split: expected(split, version="v12") for split in SPLITS}
    command = ["ontonotes", "--release", str(RELEASE), "--skeletons", str(SKELETONS), str(tmp_path / "zh")]
    assert run([*command, "--language", "chinese"]) == 0
    assert written(tmp_path / "zh", "chinese") == {split: expected(split, "chinese") for split in SPLITS}


def test_the_hubs_parquet(tmp_path):
    folder = write_hub_parquet(tmp_path / "hub", {split: expected(split) for split in SPLITS})
    assert run(["ontonotes", "--parquet", str(folder), str(tmp_path / "out")]) == 0
    assert written(tmp_path / "out") == {split: expected(split) for split in SPLITS}


def test_an_error_is_one_line_and_the_folder_is_left_as_it_was(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "kept.txt").write_text("earlier\n")
    release = shutil.copytree(RELEASE, tmp_path / "release")
    (release / "data/files/data/english/annotations/bn/pri/00/pri_0003.parse").unlink()
    assert run(["ontonotes", "--release", str(release), "--skeletons", str(SKELETONS), str(out)]) == 2
    line = one_error_line(capsys.readouterr().err, "pri_0003.v4_gold_skel", "bn/pri/00/pri_0003", "pri_0003.parse")
    assert "has no tree file in the release" in line
    assert [path.name for path in out.iterdir()] == ["kept.txt"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out", "release"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--release", "R"], "give --release RELEASE_DIR with --skeletons SKELETON_DIR, or --parquet PARQUET_DIR"),
        (["--parquet", "P", "--release", "R"], "give --parquet, or --release with --skeletons, not both"),
        (["--release", "no/such/release", "--skeletons", "S"], "no/such/release: no such folder"),
        (["--parquet", "no/such/parquet"], "no/such/parquet: no such folder"),
    ],
)
def test_usage_errors(tmp_path, capsys, arguments, message):
    assert run(["ontonotes", *arguments, str(tmp_path / "out")]) == 2
    assert message in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_a_parquet_file_of_another_schema(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = write_hub_parquet(tmp_path, {split: expected(split) for split in SPLITS})
    pq.write_table(pa.table({"id": ["1"], "tokens": [["a"]]}), folder / "validation" / "0000.parquet")
    assert run(["ontonotes", "--parquet", str(folder), str(tmp_path / "out")]) == 2
    line = one_error_line(capsys.readouterr().err, folder / "validation" / "0000.parquet")
    assert "not the Hub's conll2012_ontonotesv5 schema: no column 'document_id'" in line


def test_a_release_without_the_tree_and_a_skeleton_that_disagrees(tmp_path, capsys):
    assert run(["ontonotes", "--release", str(tmp_path), "--skeletons", str(SKELETONS), str(tmp_path / "o")]) == 2
    assert "not an OntoNotes 5.0 release" in one_error_line(capsys.readouterr().err, tmp_path)
    skeletons = shutil.copytree(SKELETONS, tmp_path / "conll-2012")
    skeleton = skeletons / "v4/data/development/data/english/annotations/wb/eng/00/eng_0007.v4_gold_skel"
    lines = skeleton.read_text().splitlines()
    del lines[2]  # a word less in the first sentence
    skeleton.write_text("\n".join(lines) + "\n")
    assert run(["ontonotes", "--release", str(RELEASE), "--skeletons", str(skeletons), str(tmp_path / "o")]) == 2
    line = one_error_line(capsys.readouterr().err, f"{skeleton}:2", "document wb/eng/00/eng_0007 part 0", "sentence 1")
    assert "7 words, but its tree" in line and "has 8" in line
    assert not (tmp_path / "o").exists()


def test_help_lists_the_command(capsys):
    assert run(["--help"]) == 0
    assert "  ontonotes " in capsys.readouterr().out
