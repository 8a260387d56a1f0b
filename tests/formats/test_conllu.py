"""CoNLL-U files with CorefUD coreference read as the CoNLL-2012 documents they are."""

from __future__ import annotations

import pytest

from coref_pipeline.evaluation.predictions import gold_key
from coref_pipeline.evaluation.scoring import read_clusters
from coref_pipeline.evaluation.test_sets import read_test_sets
from coref_pipeline.formats.conll import ConllFile, ConllFormatError, read_conll
from coref_pipeline.formats.conllu import conllu_to_conll2012, is_conllu
from coref_pipeline.formats.corpus import preprocess_corpus
from tests.paths import FIXTURES

TWIN = FIXTURES / "conllu" / "twin.conllu"
TWIN_CONLL = FIXTURES / "conllu" / "twin.v4_gold_conll"
HEADER = "# global.Entity = eid-etype-head-other\n# newdoc id = doc_7\n"


def row(number: str, word: str, entity: str = "", xpos: str = "NN") -> str:
    misc = f"Entity={entity}" if entity else "_"
    return "\t".join([number, word, word.lower(), "NOUN", xpos, "_", "0", "dep", "_", misc]) + "\n"


def test_a_conllu_file_is_its_conll_twin():
    """Words, sentences, speakers, documents and clusters: what preprocess reads, and what the scorer reads."""
    conllu, conll = preprocess_corpus(ConllFile.read(TWIN)), preprocess_corpus(ConllFile.read(TWIN_CONLL))
    for column in ("doc_key", "genre", "words", "sentence_ids", "speakers", "pos", "clusters"):
        assert conllu[column].tolist() == conll[column].tolist(), column
    assert conllu["doc_key"].tolist() == ["bc/twin/00/twin_0000_0", "nw/twin/00/twin_0001_0"]
    assert conllu["speakers"][0][:5] == ["Ana_Lee"] * 5 and conllu["speakers"][0][5] == "Ben"
    assert conllu["words"][0][5:] == ["He", "'s", "happy", "."]  # the multiword token's words; no empty node
    assert conllu["clusters"][1] == [[[0, 2], [8, 8]], [[6, 6], [4, 8], [10, 10]]]
    assert read_clusters(TWIN) == read_clusters(TWIN_CONLL)
    assert gold_key(ConllFile.read(TWIN)).clusters == gold_key(ConllFile.read(TWIN_CONLL)).clusters
    assert [document.doc_key for document in read_conll(TWIN)] == conllu["doc_key"].tolist()


def test_a_named_test_set_may_be_conllu(tmp_path):
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "part.conllu").write_text(TWIN.read_text())
    [test_set] = read_test_sets({"twin": {"path": str(folder)}}, remove_singletons=False)
    assert gold_key(test_set.gold).clusters == gold_key(ConllFile.read(TWIN_CONLL)).clusters


def test_brackets_in_the_order_of_the_chunks():
    """Closings before openings on one word (CorefUD's rule 1), a one-word mention inside a longer one."""
    text = HEADER + row("1", "A", "(e1-x-1") + row("2", "B", "(e2-x-1") + row("3", "C", "e1)(e3-x-1(e4-x-1)")
    text += row("4", "D", "e3)e2)") + "\n"
    converted = conllu_to_conll2012(text, "x.conllu")
    assert [line.split("\t")[-1] for line in converted.splitlines()[1:5]] == ["(0", "(1", "0)|(2|(3)", "2)|1)"]
    [document] = read_conll_text(converted)
    assert document.clusters == [[(0, 2)], [(2, 2)], [(2, 3)], [(1, 3)]]


def read_conll_text(text: str):
    from coref_pipeline.formats.conll import parse_conll_lines

    return parse_conll_lines(text.splitlines(), "x", allow_cross_sentence=False)


def test_a_file_without_newdoc_is_one_document_named_after_it(tmp_path):
    path = tmp_path / "story.conllu"
    path.write_text(row("1", "Rain", "(e1-x-1)") + row("2", "fell") + "\n" + row("1", "It", "(e1-x-1)") + "\n")
    [document] = read_conll(path)
    assert (
        document.doc_key == "story" and document.clusters == [[(0, 0), (2, 2)]] and document.sentence_ids == [0, 0, 1]
    )
    assert is_conllu(path) and not is_conllu(TWIN_CONLL)


@pytest.mark.parametrize(
    ("body", "line", "what"),
    [
        (row("1", "A", "e1)"), 3, "unbalanced Entity= bracket: 'e1)' closes a mention of e1 that is not open"),
        (
            row("1", "A", "(e1-x-1") + row("2", "B") + "\n",
            3,
            "unbalanced Entity= bracket: '(e1' opened here is not closed",
        ),
        (row("1", "A", "(e1[1/2]-x-1)"), 3, "Entity=(e1[1/2]-x-1): the discontinuous mention e1[1/2]"),
        (row("1", "A") + row("1.1", "_", "(e2-x-1)"), 4, "Entity=(e2-x-1) on the empty node 1.1"),
        (row("1", "New York"), 3, "the word 'New York': a CoNLL-2012 word has no whitespace"),
        ("1\tA\n", 3, "a token line of 2 tab-separated columns, not 10"),
    ],
    ids=["closing-without-opening", "open-at-sentence-end", "discontinuous", "empty-node", "space", "columns"],
)
def test_what_cannot_be_read_is_one_line_naming_file_line_document_sentence(tmp_path, body, line, what):
    path = tmp_path / "bad.conllu"
    path.write_text(HEADER + row("1", "Before") + "\n" + body + "\n")
    with pytest.raises(ConllFormatError) as raised:
        ConllFile.read(path)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:{line + 2}: document doc_7, sentence 2: {what}"), message


def test_an_empty_node_without_entity_is_skipped():
    text = HEADER + row("1", "A", "(e1-x-1)") + row("1.1", "_") + row("2", "B", "(e1-x-1)") + "\n"
    [document] = read_conll_text(conllu_to_conll2012(text, "x.conllu"))
    assert document.words == ["A", "B"] and document.clusters == [[(0, 0), (1, 1)]]
