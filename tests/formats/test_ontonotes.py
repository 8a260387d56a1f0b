"""OntoNotes 5.0 -> CoNLL-2012 files, byte for byte as the CoNLL-2012 scripts make them.

``tests/fixtures/ontonotes/expected*/`` are the original scripts' outputs (``skeleton2conll.sh`` /
``skeleton2conll.py`` under Python 2.7, then ``compile_partition``'s ``cat``) on made-up documents in the
release's formats (README.md there says how they were made); nothing here runs the original.
"""

from __future__ import annotations

import shutil
import tarfile

import pytest

from coref_pipeline.config_base import ConfigError
from coref_pipeline.formats.ontonotes import (
    SPLITS,
    OntonotesError,
    OntonotesSettings,
    build_corpus,
    hub_corpus,
    release_corpus,
)
from coref_pipeline.formats.ontonotes.hub import bio_brackets, coref_cells, parse_bits
from coref_pipeline.formats.ontonotes.layout import format_rows
from coref_pipeline.formats.ontonotes.skeletons import fill_skeleton, skeleton_of
from coref_pipeline.formats.ontonotes.trees import read_parse_trees, tree_words
from tests.formats.ontonotes_helpers import documents, split_into_release, write_hub_parquet
from tests.paths import FIXTURES, PROJECT_ROOT, SHARED_DIR

ONTONOTES = FIXTURES / "ontonotes"
RELEASE = ONTONOTES / "release"
SKELETONS = ONTONOTES / "conll-2012"
V12_TREE = ONTONOTES / "conll-formatted-ontonotes-5.0"


def expected(split: str, language: str = "english", version: str = "v4") -> str:
    folder = ONTONOTES / ("expected" if version == "v4" else f"expected_{version}")
    return (folder / f"{split}.{language}.{version}_gold_conll").read_bytes().decode("utf-8")


# ------------------------------------------------------------------ the scripts' files, byte for byte


@pytest.mark.parametrize(
    ("language", "version", "skeletons"),
    [("english", "v4", SKELETONS), ("chinese", "v4", SKELETONS), ("english", "v12", V12_TREE)],
)
def test_the_release_and_the_skeletons_give_the_scripts_files(language, version, skeletons):
    corpus = release_corpus(RELEASE, skeletons, language, progress=False)
    assert (corpus.language, corpus.version) == (language, version)
    for split in SPLITS:
        assert corpus.texts[split] == expected(split, language, version), split
        assert corpus.file_name(split) == f"{split}.{language}.{version}_gold_conll"


def rows_of(split: str, name: str, language: str = "english") -> list[list[str]]:
    [lines] = [lines for found, lines in documents(expected(split, language)) if found == name]
    return [line.split() for line in lines if line.split() and not line.startswith("#")]


def test_the_fixtures_hold_what_the_issue_names():
    """Traces, EDITED, several trees a file with blank lines, PTB escapes, tc speakers, a multi-part
    document, a document without coreference: in the inputs, and filled as the scripts fill them."""
    parse = (RELEASE / "data/files/data/english/annotations/nw/wsj/00/wsj_0004.parse").read_text()
    assert "(-NONE- *U*)" in parse and "(-LRB- -LRB-)" in parse and "\n\n\n   \n(TOP" in parse
    words = [row[3] for row in rows_of("train", "nw/wsj/00/wsj_0004")]
    assert "-LRB-" in words and "-RRB-" in words and not {"*U*", "*T*-1", "0"} & set(words)
    telephone = rows_of("train", "tc/ch/00/ch_0005")
    assert {row[9] for row in telephone} == {"A", "B"}
    assert [row[3] for row in telephone][:4] == ["uh", "I", "think", "it"]  # the EDITED "I" is gone
    assert "nullp" in [row[3] for row in telephone]  # a tree that is all disfluency
    assert "#begin document (bc/cctv/00/cctv_0001); part 001" in expected("train")
    assert {row[-1] for row in rows_of("train", "pt/nt/40/nt_4006")} == {"-"}
    assert [row[3] for row in rows_of("dev", "tc/ch/00/ch_0012", "chinese")][:2] == ["我", "我"]  # EDITED kept


def test_archives_give_the_same_files(tmp_path):
    """The distributed archives, read as streams (nothing extracted), give what the extracted files give."""
    archives = tmp_path / "downloads"
    archives.mkdir()
    for name, partition in (
        ("conll-2012-train.v4.tar.gz", "train"),
        ("conll-2012-development.v4.tar.gz", "development"),
        ("conll-2012-test-key.tar.gz", "test"),
    ):
        with tarfile.open(archives / name, "w:gz") as tar:
            tar.add(SKELETONS / "v4" / "data" / partition, arcname=f"conll-2012/v4/data/{partition}")
    corpus = release_corpus(RELEASE / "data" / "files" / "data", archives, progress=False)
    assert {split: corpus.texts[split] for split in SPLITS} == {split: expected(split) for split in SPLITS}
    assert not any(path.is_dir() for path in archives.iterdir())


def test_a_filled_file_without_its_skeleton_is_taken_as_it_is(tmp_path):
    """compile_partition concatenates every *_gold_conll; a skeleton's own filled file is rewritten."""
    skeletons = shutil.copytree(SKELETONS, tmp_path / "conll-2012")
    folder = skeletons / "v4/data/train/data/english/annotations/pt/nt/40"
    (folder / "nt_4006.v4_gold_skel").unlink()
    [text] = [lines for name, lines in documents(expected("train")) if name == "pt/nt/40/nt_4006"]
    (folder / "nt_4006.v4_gold_conll").write_text("\n".join(text) + "\n")
    (folder.parents[2] / "tc/ch/00/ch_0005.v4_gold_conll").write_text("stale: its skeleton is filled again\n")
    corpus = release_corpus(RELEASE, skeletons, progress=False)
    assert corpus.texts["train"] == expected("train")


def test_the_order_is_the_byte_order_of_the_names():
    names = [name for name, _ in documents(expected("train"))]
    assert names == sorted(names) and names.index("bn/p2.5_a2e/00/p2.5_a2e_0002") < names.index("bn/pri/00/pri_0003")


# ------------------------------------------------------------------ the scripts' rules, one by one


def test_words_of_a_tree_leave_out_traces_and_edited_subtrees():
    tree = "(TOP (S (EDITED (NP (PRP I))) (NP-SBJ (PRP I)) (VP (VBD left) (NP (-NONE- *T*-1))) (. .)))"
    assert tree_words(tree, remove_edited=True) == ["I", "left", "."]
    assert tree_words(tree, remove_edited=False) == ["I", "I", "left", "."]  # Chinese: -edited is not passed
    assert tree_words("(TOP (EDITED (S (NP (PRP you)) (VP (VBP know)))))", True) == ["nullp"]
    assert tree_words("(TOP (S (NP (-NONE- *))))", True) == [""]  # all traces: one empty word
    assert tree_words("(TOP (S (NP (-NONE- *))))", False) == [""]
    assert tree_words("(TOP (-LRB- -LRB-) (CD 3) (-RRB- -RRB-))", True) == ["-LRB-", "3", "-RRB-"]


def test_a_parse_file_has_several_trees_blank_lines_and_comments():
    text = "; a comment line\n(TOP (S (NN a)))\n\n\n  \n(TOP\n  (S (NN b)\n     (NN c)))\n* another\n"
    trees = read_parse_trees(text, "x.parse", remove_edited=True)
    assert trees.words == [["a"], ["b", "c"]] and trees.starts == [1, 5]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("(TOP (S (NN a))\n", "x.parse:1: a tree that is never closed"),
        ("(TOP (NN a)))\n", "x.parse:1: a ')' that closes no tree"),
        ("(TOP (NN a))\nstray words\n", "x.parse:2: text outside a tree"),
        ("(TOP (NN a b))\n", "x.parse:1: a node with more than one word ('a', 'b')"),
        ("( (S (NN a)))\n", "x.parse:1: a node without a label"),
    ],
)
def test_a_malformed_parse_file_is_named_with_its_line(text, message):
    with pytest.raises(OntonotesError) as raised:
        read_parse_trees(text, "x.parse", remove_edited=True)
    assert str(raised.value).startswith(message)


def test_the_layout_pads_as_the_scripts_do():
    rows = [["doc", "0", "9", "said", "-"], ["doc", "0", "10", "a*", "(1)"]]
    # right-aligned to the widest cell + 2; "9", "-" and "a*" keep a space after them
    assert format_rows(rows) == ["doc  0    9    said    -", "doc  0   10     a*    (1)"]
    # rows of different lengths: the scripts' column transposition
    assert format_rows([["a", "b", "c"], ["dd", "e"]]) == ["a   b   c", "dd   e"]


def test_an_empty_word_leaves_no_cell_as_in_the_scripts():
    trees = read_parse_trees("(TOP (NP (-NONE- *)))\n", "x.parse", remove_edited=True)
    filled = fill_skeleton("#begin document (d); part 000\nd 0 0 [WORD] XX * -\n\n#end document\n", "x", trees)
    assert filled.splitlines()[1] == "d  0   0    XX  *   -"  # the word cell is gone: XX is in its column


def test_skeleton_paths():
    v4 = skeleton_of("conll-2012/v4/data/train/data/english/annotations/bc/cnn/00/cnn_0001.v4_gold_skel", "s")
    assert (v4.partition, v4.language, v4.document, v4.version, v4.kind) == (
        "train",
        "english",
        "bc/cnn/00/cnn_0001",
        "v4",
        "skel",
    )
    assert v4.conll_name == "bc/cnn/00/cnn_0001.v4_gold_conll"
    v12 = skeleton_of("x/data/development/data/english/annotations/bn/p2.5_a2e/00/p2.5_a2e_0001.gold_skel", "s")
    assert (v12.version, v12.conll_name) == ("v12", "bn/p2.5_a2e/00/p2.5_a2e_0001.gold_conll")
    assert skeleton_of("conll-2012/v4/data/train/data/english/annotations/bc/cnn/00/cnn_0001.v4_auto_skel", "") is None


# ------------------------------------------------------------------ errors: one line, nothing written


def one_line(error: BaseException, *names: object) -> str:
    message = str(error)
    assert "\n" not in message
    for name in names:
        assert str(name) in message, (name, message)
    return message


def test_a_release_without_the_expected_tree(tmp_path):
    (tmp_path / "ontonotes-release-5.0" / "data").mkdir(parents=True)
    with pytest.raises(OntonotesError) as raised:
        release_corpus(tmp_path / "ontonotes-release-5.0", SKELETONS, progress=False)
    assert "not an OntoNotes 5.0 release: no data/files/data/english/annotations" in one_line(
        raised.value, tmp_path / "ontonotes-release-5.0"
    )


def test_a_skeleton_whose_word_count_disagrees_with_its_tree(tmp_path):
    release = shutil.copytree(RELEASE, tmp_path / "release")
    parse = release / "data/files/data/english/annotations/nw/wsj/00/wsj_0004.parse"
    parse.write_text(parse.read_text().replace("(NN %)", "(NN %) (NN percent)"))
    with pytest.raises(OntonotesError) as raised:
        release_corpus(release, SKELETONS, progress=False)
    message = one_line(raised.value, "wsj_0004.v4_gold_skel:", "document nw/wsj/00/wsj_0004 part 0", "sentence 3")
    assert "6 words, but its tree (" in message and "wsj_0004.parse:" in message and "has 7:" in message


def test_a_skeleton_with_no_parse_file(tmp_path):
    release = shutil.copytree(RELEASE, tmp_path / "release")
    (release / "data/files/data/english/annotations/bn/pri/00/pri_0003.parse").unlink()
    with pytest.raises(OntonotesError) as raised:
        release_corpus(release, SKELETONS, progress=False)
    message = one_line(raised.value, "pri_0003.v4_gold_skel", "document bn/pri/00/pri_0003", "pri_0003.parse")
    assert "has no tree file in the release" in message


def test_a_partition_without_skeletons_and_skeletons_of_two_versions(tmp_path):
    skeletons = shutil.copytree(SKELETONS, tmp_path / "conll-2012")
    shutil.rmtree(skeletons / "v4/data/test/data/english")
    with pytest.raises(OntonotesError) as raised:
        release_corpus(RELEASE, skeletons, progress=False)
    assert "no english v4 gold skeletons of the test partition" in one_line(raised.value)
    shutil.copytree(V12_TREE, skeletons / "conll-formatted-ontonotes-5.0")
    with pytest.raises(OntonotesError) as raised:
        release_corpus(RELEASE, skeletons, progress=False)
    assert "several versions (v12, v4)" in one_line(raised.value)
    v12 = release_corpus(RELEASE, skeletons, version="v12", progress=False)
    assert v12.texts["dev"] == expected("dev", version="v12")
    (tmp_path / "empty").mkdir()
    with pytest.raises(OntonotesError, match="no english gold skeletons in"):
        release_corpus(RELEASE, tmp_path / "empty", progress=False)


def test_arabic_is_refused_by_the_release_route():
    with pytest.raises(OntonotesError, match=r"arabic: .*\.lemma files"):
        release_corpus(RELEASE, SKELETONS, "arabic", progress=False)


def test_nothing_is_half_written(tmp_path):
    out = tmp_path / "corpus"
    out.mkdir()
    (out / "train.english.v4_gold_conll").write_text("before\n")
    release = shutil.copytree(RELEASE, tmp_path / "release")
    (release / "data/files/data/english/annotations/wb/eng/00/eng_0007.parse").write_text("(TOP (NN x)\n")
    with pytest.raises(OntonotesError, match="eng_0007.parse:1: a tree that is never closed"):
        release_corpus(release, SKELETONS, progress=False).write(out)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus", "release"]  # no temporary folder left
    assert [path.name for path in out.iterdir()] == ["train.english.v4_gold_conll"]
    written = release_corpus(RELEASE, SKELETONS, progress=False).write(out)
    assert [path.read_text() for path in written] == [expected(split) for split in SPLITS]


# ------------------------------------------------------------------ the round trip


def _escaped(text: str) -> str:
    """The corpus as OntoNotes writes its words: parentheses escaped (-LRB-, -RRB-), as in the release's trees."""
    escapes = {"(": "-LRB-", ")": "-RRB-"}
    lines = []
    for line in text.splitlines():
        cells = line.split()
        if line.startswith("#") or not cells:
            lines.append(line)
        else:
            lines.append(" ".join([*cells[:3], escapes.get(cells[3], cells[3]), *cells[4:]]))
    return "\n".join(lines) + "\n"


ROUND_TRIP = [PROJECT_ROOT / "data/01_raw/sample" / f"{split}.english.v4_gold_conll" for split in SPLITS] + [
    SHARED_DIR / "corpora/litbank" / f"{split}.conll" for split in SPLITS
]


@pytest.mark.parametrize(
    "corpus_file",
    [pytest.param(path, marks=[pytest.mark.slow] if path.name == "train.conll" else []) for path in ROUND_TRIP],
    ids=lambda path: f"{path.parent.name}/{path.name}",
)
def test_every_document_survives_skeleton_and_trees(corpus_file, tmp_path):
    """Each document of a CoNLL-2012 file, cut into a skeleton and .parse trees and rebuilt, is itself again:
    every cell of every row, and the scripts' layout of them byte for byte."""
    if not corpus_file.is_file():
        pytest.skip(f"{corpus_file} is absent (the shared corpora are not on this machine)")
    text = _escaped(corpus_file.read_text(encoding="utf-8"))
    split_into_release(text, tmp_path)
    rebuilt = release_corpus(tmp_path / "release", tmp_path / "conll-2012", progress=False)
    assert rebuilt.texts["train"] == rebuilt.texts["test"]
    originals, results = documents(text), documents(rebuilt.texts["train"])
    assert [name for name, _ in results] == [name for name, _ in originals]
    for (name, original), (_, result) in zip(originals, results, strict=True):
        assert [line.split() for line in result] == [line.split() for line in original], name
        assert result == _scripts_layout(original), name


def _scripts_layout(lines: list[str]) -> list[str]:
    out, rows = [], []
    for line in lines:
        if line.startswith("#"):
            out.append(line.strip())
        elif line.split():
            rows.append(line.split())
        else:
            out += [*format_rows(rows), ""]
            rows = []
    return out


# ------------------------------------------------------------------ the Hub's export


@pytest.mark.parametrize("layout", ["folders", "files"])
@pytest.mark.parametrize("config", ["english_v4", "english_v12"])
@pytest.mark.parametrize("metadata", [True, False], ids=["with-features", "without-features"])
def test_the_hubs_parquet_gives_the_scripts_files(tmp_path, layout, config, metadata):
    version = config.split("_")[1]
    texts = {split: expected(split, version=version) for split in SPLITS}
    folder = write_hub_parquet(tmp_path, texts, config, layout, metadata)
    for given in (folder, tmp_path):  # the config's folder, or the folder holding the configs
        corpus = hub_corpus(given, "english", progress=False)
        assert (corpus.language, corpus.version) == ("english", version)
        assert {split: corpus.texts[split] for split in SPLITS} == texts


def test_the_hubs_cells():
    assert parse_bits("(TOP(S(NP (PRP It) )(VP (VBD ran) )(. .) ))", 3) == ["(TOP(S(NP*)", "(VP*)", "*))"]
    assert parse_bits(None, 1) == ["(TOP*)"] and parse_bits(None, 3) == ["(TOP*", "*", "*)"]
    tags = ["B-PERSON", "I-PERSON", "O", "B-GPE", "B-GPE"]
    assert bio_brackets(tags, entities=True) == ["(PERSON*", "*)", "*", "(GPE)", "(GPE)"]
    assert bio_brackets(["B-ARG0", "B-V", "B-ARG1", "I-ARG1"]) == ["(ARG0*)", "(V*)", "(ARG1*", "*)"]
    spans = [[12, 0, 0], [3, 0, 2], [1, 0, 1], [9, 2, 2], [7, 1, 2]]
    assert coref_cells(spans, 3) == ["(1|(3|(12)", "(7|1)", "(9)|7)|3)"]


def test_a_parquet_file_of_another_schema(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "english_v4"
    texts = {split: expected(split) for split in SPLITS}
    write_hub_parquet(tmp_path, texts)
    pq.write_table(pa.table({"tokens": [["a"]], "ner_tags": [[0]]}), folder / "train" / "0000.parquet")
    with pytest.raises(OntonotesError) as raised:
        hub_corpus(folder, progress=False)
    message = one_line(raised.value, folder / "train" / "0000.parquet")
    assert "not the Hub's conll2012_ontonotesv5 schema: no column 'document_id'" in message
    sentence = pa.struct([("part_id", pa.int32()), ("words", pa.list_(pa.string()))])
    table = pa.table(
        {"document_id": ["d"], "sentences": pa.array([[{"part_id": 0, "words": ["a"]}]], pa.list_(sentence))}
    )
    pq.write_table(table, folder / "train" / "0000.parquet")
    with pytest.raises(OntonotesError, match="its sentences have no 'pos_tags'"):
        hub_corpus(folder, progress=False)
    (folder / "train" / "0000.parquet").write_text("not parquet")
    with pytest.raises(OntonotesError, match="0000.parquet: not a Parquet file"):
        hub_corpus(folder, progress=False)
    shutil.rmtree(folder / "train")
    with pytest.raises(OntonotesError, match="no Parquet file of the train split"):
        hub_corpus(folder, progress=False)


# ------------------------------------------------------------------ the settings


def test_the_settings_take_one_source_and_reject_unknown_keys():
    settings = OntonotesSettings.from_dict(
        {"from_release": {"english": {"release": str(RELEASE), "skeletons": str(SKELETONS)}}}
    )
    assert settings.language == "english"
    assert build_corpus(settings, progress=False).texts["dev"] == expected("dev")
    with pytest.raises(ConfigError, match=r"unknown ontonotes key\(s\) \['releases'\]"):
        OntonotesSettings.from_dict({"releases": {}})
    with pytest.raises(ConfigError, match=r"unknown ontonotes.from_release key\(s\) \['parse'\]"):
        OntonotesSettings.from_dict({"from_release": {"english": {"release": "r", "skeletons": "s", "parse": "p"}}})
    with pytest.raises(ConfigError, match="one source at a time"):
        OntonotesSettings.from_dict(
            {"from_release": {"english": {"release": "r", "skeletons": "s"}}, "from_parquet": {"english": "p"}}
        )
    with pytest.raises(ConfigError, match="'skeletons' must be a folder"):
        OntonotesSettings.from_dict({"from_release": {"english": {"release": "r"}}})
    with pytest.raises(ConfigError, match="no source"):
        build_corpus(OntonotesSettings())


def test_the_parquet_settings(tmp_path):
    folder = write_hub_parquet(tmp_path, {split: expected(split) for split in SPLITS})
    settings = OntonotesSettings.from_dict({"from_parquet": {"english": str(folder)}})
    assert build_corpus(settings, progress=False).texts["train"] == expected("train")
    with pytest.raises(OntonotesError, match="the english_v4 config, not chinese_v4"):
        build_corpus(OntonotesSettings.from_dict({"from_parquet": {"chinese": str(folder)}}), progress=False)
