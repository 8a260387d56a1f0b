"""CoNLL-2012 reader and writer."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from coref_pipeline.formats.conll import (
    ConllFormatError,
    document_stats,
    format_coref_cells,
    genre_of,
    merge_clusters,
    parse_conll_lines,
    parse_coref_column,
    read_conll,
    write_conll_response,
)
from tests.paths import FIXTURES

TINY = FIXTURES / "tiny.v4_gold_conll"


def conll_text(*documents: str) -> list[str]:
    return "\n".join(documents).splitlines()


def doc(name: str, body: str, part: str = "000") -> str:
    """A document block from rows written as 'word coref' pairs, blank lines between sentences."""
    lines = [f"#begin document ({name}); part {part}"]
    index = 0
    for raw in body.strip("\n").split("\n"):
        if not raw.strip():
            lines.append("")
            index = 0
            continue
        word, coref = raw.split()
        lines.append("\t".join([name, str(int(part)), str(index), word, "NN", "*", "-", "-", "-", "spk", "*", coref]))
        index += 1
    lines += ["", "#end document"]
    return "\n".join(lines)


def test_reads_the_tiny_fixture():
    [document] = read_conll(TINY)
    assert document.name == "bc/tiny/00/tiny_0000"
    assert document.part == 0
    assert document.doc_key == "bc/tiny/00/tiny_0000_0"
    assert document.header == "#begin document (bc/tiny/00/tiny_0000); part 000"
    assert document.words == ["Anna", "Kowalczyk", "met", "her", "brother", "/.", "He", "smiled", "\ue000", "."]
    assert document.sentence_ids == [0, 0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert document.speakers == ["Anna_R"] * 6 + ["Ben_R"] * 4
    assert document.pos[3] == "PRP$" and document.pos[6] == "PRP"
    # Cluster 1 completes first (word 1), then cluster 2 (word 4); mentions in completion order.
    assert document.clusters == [[(0, 1), (3, 3)], [(3, 4), (6, 6)]]


def test_a_byte_order_mark_and_crlf_line_ends_read_as_the_plain_file(tmp_path):
    plain = read_conll(TINY)
    for name, data in (
        ("bom", b"\xef\xbb\xbf" + TINY.read_bytes()),
        ("crlf", TINY.read_bytes().replace(b"\n", b"\r\n")),
        ("both", b"\xef\xbb\xbf" + TINY.read_bytes().replace(b"\n", b"\r\n")),
    ):
        path = tmp_path / f"{name}.v4_gold_conll"
        path.write_bytes(data)
        assert [replace(document, source=str(TINY)) for document in read_conll(path)] == plain, name
        # the response written from it has the plain file's layout, without the mark
        write_conll_response(path, {plain[0].doc_key: [[(0, 1)]]}, tmp_path / f"{name}.response")
        assert not (tmp_path / f"{name}.response").read_bytes().startswith(b"\xef\xbb\xbf")


def test_a_gzip_file_reads_as_its_text_and_a_broken_one_is_named(tmp_path):
    import gzip

    plain = read_conll(TINY)
    packed = tmp_path / "tiny.v4_gold_conll.gz"
    packed.write_bytes(gzip.compress(TINY.read_bytes()))
    assert [replace(document, source=str(TINY)) for document in read_conll(packed)] == plain
    broken = tmp_path / "broken.conll.gz"
    broken.write_bytes(gzip.compress(TINY.read_bytes())[:-20])
    with pytest.raises(ConllFormatError, match=r"broken\.conll\.gz: not a readable gzip file"):
        read_conll(broken)
    not_packed = tmp_path / "plain.conll.gz"
    not_packed.write_bytes(TINY.read_bytes())
    with pytest.raises(ConllFormatError, match="not a readable gzip file"):
        read_conll(not_packed)


def test_a_directory_in_place_of_a_file_is_named(tmp_path):
    with pytest.raises(ConllFormatError, match="a directory, not a CoNLL file"):
        read_conll(tmp_path)


def test_space_aligned_columns_and_several_parts():
    text = doc("nw/a", "John (0)\nsaw -\nhim (0)") + "\n" + doc("nw/a", "It (1)\nis -\nit (1)", part="001")
    aligned = [line.replace("\t", "   ") for line in text.splitlines()]
    documents = parse_conll_lines(aligned, "aligned.conll")
    assert [d.doc_key for d in documents] == ["nw/a_0", "nw/a_1"]
    assert documents[0].clusters == [[(0, 0), (2, 2)]]
    assert documents[1].clusters == [[(0, 0), (2, 2)]]


def test_nested_mentions_and_mentions_on_one_word():
    body = "the (0|(1\nmayor 1)\n's -\noffice 0)\nand -\nhis (2|(1)\nbrother 2)\nhe (2)"
    [document] = parse_conll_lines(conll_text(doc("nw/x", body)))
    clusters = {frozenset(c) for c in document.clusters}
    assert clusters == {frozenset({(0, 3)}), frozenset({(0, 1), (5, 5)}), frozenset({(5, 6), (7, 7)})}


def test_same_cluster_nested_uses_a_stack():
    [document] = parse_conll_lines(conll_text(doc("nw/x", "a (0|(0\nb 0)\nc 0)")))
    assert document.clusters == [[(0, 1), (0, 2)]]


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("-", []),
        ("(12)", [("single", 12)]),
        ("(3|(5)", [("open", 3), ("single", 5)]),
        ("5)|3)", [("close", 5), ("close", 3)]),
        ("(1(3(3", [("open", 1), ("open", 3), ("open", 3)]),
        ("3)3)1)", [("close", 3), ("close", 3), ("close", 1)]),
    ],
)
def test_parse_coref_column(cell, expected):
    assert parse_coref_column(cell) == expected


def test_reference_bracket_order_puts_singles_then_openings_then_closings():
    assert parse_coref_column("1)|(2)|(3", bracket_order="reference") == [("single", 2), ("open", 3), ("close", 1)]


@pytest.mark.parametrize("cell", ["(x)", "((1)", "1", "(1)x", "(1||2)", "[1]"])
def test_unknown_coref_annotations_are_rejected(cell):
    with pytest.raises(ValueError, match="annotation"):
        parse_coref_column(cell)


BAD_INPUTS = {
    "close without open": (doc("nw/b", "a -\nb 4)"), 3, "closes a mention of cluster 4 that was never opened"),
    "unknown bracket": (doc("nw/b", "a -\nb (x)"), 3, "unknown coreference annotation '(x)'"),
    "not closed in its sentence": (doc("nw/b", "a (1\nb -\n\nc 1)"), 2, "not closed by the end of its sentence"),
    "not closed at all": (
        doc("nw/b", "a (1\nb -"),
        2,
        "'(1' opened here is never closed (no '1)' before '#end document')",
    ),
    "repeated mention": (doc("nw/b", "a (1)|(1)\nb -"), 2, "repeated mention: words 0-0 of document 'nw/b_0'"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_coref_gives_file_line_and_reason(case, tmp_path):
    text, line, reason = BAD_INPUTS[case]
    path = tmp_path / "bad.v4_gold_conll"
    path.write_text(text + "\n")
    with pytest.raises(ConllFormatError) as caught:
        read_conll(path)
    assert caught.value.line == line
    assert str(caught.value).startswith(f"{path}:{line}: ")
    assert reason in str(caught.value)


def test_too_few_columns(tmp_path):
    path = tmp_path / "short.conll"
    path.write_text("#begin document (nw/c); part 000\nnw/c 0 0 word NN (0)\n\n#end document\n")
    with pytest.raises(ConllFormatError, match=r"short\.conll:2: row has 6 columns, at least 12 expected"):
        read_conll(path)


def test_missing_end_document(tmp_path):
    path = tmp_path / "noend.conll"
    first = doc("nw/d", "a -").replace("#end document", "")
    path.write_text(first + "\n" + doc("nw/e", "b -") + "\n")
    with pytest.raises(ConllFormatError, match=r"noend\.conll:1: document 'nw/d_0' has no '#end document' before"):
        read_conll(path)
    path.write_text(first)
    with pytest.raises(ConllFormatError, match=r"noend\.conll:1: document 'nw/d_0' has no '#end document' \(file"):
        read_conll(path)


def test_empty_document(tmp_path):
    path = tmp_path / "empty.conll"
    path.write_text("#begin document (nw/f); part 000\n\n#end document\n")
    with pytest.raises(ConllFormatError, match=r"empty\.conll:1: empty document 'nw/f_0'"):
        read_conll(path)


def test_rows_outside_documents_are_an_error(tmp_path):
    path = tmp_path / "stray.conll"
    path.write_text("nw/g 0 0 word NN * - - - - * -\n" + doc("nw/g", "a -") + "\n")
    with pytest.raises(ConllFormatError, match=r"stray\.conll:1: token row outside"):
        read_conll(path)


def test_skip_bad_documents_reports_and_changes_nothing_else(caplog):
    good_a = doc("nw/g", "John (0)\nsaw -\nhim (0)")
    bad = doc("nw/h", "a (1\nb -")
    good_b = doc("nw/i", "It (2)\nis -\n\nit (2)")
    alone = parse_conll_lines(conll_text(good_a, good_b), "f.conll")
    errors: list[ConllFormatError] = []
    with caplog.at_level(logging.WARNING):
        kept = parse_conll_lines(conll_text(good_a, bad, good_b), "f.conll", skip_bad_documents=True, errors=errors)
    assert [(d.doc_key, d.words, d.clusters, d.sentence_ids) for d in kept] == [
        (d.doc_key, d.words, d.clusters, d.sentence_ids) for d in alone
    ]
    assert len(errors) == 1 and "nw/h" not in [d.doc_key for d in kept]
    assert "Skipping bad document" in caplog.text and "never closed" in caplog.text
    with pytest.raises(ConllFormatError):
        parse_conll_lines(conll_text(good_a, bad, good_b), "f.conll")


def test_clusters_sharing_a_mention_are_merged(caplog):
    with caplog.at_level(logging.WARNING):
        [document] = parse_conll_lines(conll_text(doc("nw/j", "a (0)\nb (1)|(0)\nc (1)")))
    assert document.clusters == [[(0, 0), (1, 1), (2, 2)]]
    assert "Merging clusters" in caplog.text


def test_merge_clusters_follows_minimize_order_and_rejects_a_three_way_overlap():
    assert merge_clusters([[(5, 5), (1, 1)], [(7, 7)], [(9, 9), (1, 1)]]) == [[(5, 5), (1, 1), (9, 9)], [(7, 7)]]
    with pytest.raises(ValueError, match="cannot be merged"):
        merge_clusters([[(1, 1)], [(2, 2)], [(1, 1), (2, 2)]])


def test_genre_of():
    assert genre_of("bc/cctv/00/cctv_0001_0") == "bc"
    assert genre_of("1023_bleak_house_brat_0") == "nw"
    assert genre_of("1023_bleak_house_brat_0", default="lit") == "lit"


def test_format_coref_cells_orders_brackets_and_drops_duplicates(caplog):
    clusters = [[(0, 3), (5, 5)], [(0, 1), (3, 3)], [(5, 5)]]
    with caplog.at_level(logging.WARNING):
        cells = format_coref_cells(clusters, 6)
    # Openings outermost first, closings innermost first, one-word mentions between.
    assert cells == ["(0|(1", "1)", "-", "0)|(1)", "-", "(0)"]
    assert "Dropping duplicate mention [5, 5]" in caplog.text
    with pytest.raises(ValueError, match="outside the document"):
        format_coref_cells([[(4, 6)]], 6)


def _round_trip(gold: Path, tmp_path: Path) -> None:
    documents = read_conll(gold)
    response = tmp_path / "response.conll"
    write_conll_response(gold, {d.doc_key: d.clusters for d in documents}, response)
    again = read_conll(response)
    assert [d.doc_key for d in again] == [d.doc_key for d in documents]
    for before, after in zip(documents, again, strict=True):
        assert before.words == after.words and before.sentence_ids == after.sentence_ids
        assert {frozenset(c) for c in before.clusters} == {frozenset(c) for c in after.clusters}, before.doc_key
    gold_lines = gold.read_text(encoding="utf-8").splitlines()
    response_lines = response.read_text(encoding="utf-8").splitlines()
    assert len(gold_lines) == len(response_lines)
    for gold_line, response_line in zip(gold_lines, response_lines, strict=True):
        if gold_line.startswith("#"):
            assert response_line == gold_line
        else:
            assert response_line.split("\t")[:-1] == gold_line.split()[:-1]


def test_writer_round_trip_on_the_tiny_fixture(tmp_path):
    _round_trip(TINY, tmp_path)


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_writer_round_trip_on_every_litbank_document(litbank_dir, split, tmp_path):
    _round_trip(litbank_dir / f"{split}.conll", tmp_path)


def test_writer_needs_every_document_and_no_other(tmp_path):
    [document] = read_conll(TINY)
    with pytest.raises(KeyError, match="no predicted clusters for document 'bc/tiny/00/tiny_0000_0'"):
        write_conll_response(TINY, {}, tmp_path / "out.conll")
    with pytest.raises(KeyError, match="not in"):
        write_conll_response(TINY, {document.doc_key: [], "nw/other_0": []}, tmp_path / "out.conll")


def test_document_stats(litbank_dir):
    stats = document_stats(read_conll(litbank_dir / "dev.conll"))
    # Figures from the corpus README.
    assert (stats["documents"], stats["words"], stats["mentions"], stats["entities"]) == (10, 20438, 3053, 776)


def test_a_document_written_from_words_reads_back_with_its_clusters_and_speakers(tmp_path):
    from coref_pipeline.formats.conll import format_conll_document

    sentences = [["Ada", "met", "her", "sister", "."], ["She", "smiled", "."]]
    clusters = [[(0, 0), (2, 2), (5, 5)], [(2, 3), (6, 6)]]
    speakers = ["Ada L.", "Ada L.", "Ada L.", "Ada L.", "Ada L.", "-", "-", "-"]
    path = tmp_path / "doc.conll"
    path.write_text(
        format_conll_document("chapter_3", sentences, clusters, speakers)
        + format_conll_document("plain", sentences, clusters[:1]),
        encoding="utf-8",
    )
    first, second = read_conll(path)
    assert first.doc_key == "chapter_3" and second.doc_key == "plain_0"
    assert first.words == [w for s in sentences for w in s] and first.sentence_ids == [0] * 5 + [1] * 3
    assert first.speakers[0] == "Ada_L." and first.speakers[-1] == "-"
    assert sorted(map(sorted, first.clusters)) == sorted(map(sorted, clusters))
    assert second.clusters == [[(0, 0), (2, 2), (5, 5)]]
    with pytest.raises(ValueError, match="word 1 is 'two words'"):
        format_conll_document("d", [["one", "two words"]], [])
