"""Pronoun probes: reading a probe file (mentions found by their words, faults named by file and line) and judging
a model's clusters (the pair linked, strangers, non-mentions)."""

from __future__ import annotations

import json

import pytest

from coref_pipeline.errors import UserError
from coref_pipeline.studies.probes import (
    ProbeError,
    ask_probes,
    judge_probe,
    parse_probe,
    read_probes,
    summarize_probes,
)
from tests.paths import PROJECT_ROOT

ADA = {
    "text": "Ada met Charles in 1833. He showed her his engine.",
    "pronoun": "He",
    "antecedent": "Charles",
    "entities": [["Ada", "her"], ["Charles", "He", "his"], ["his engine"]],
}


def spans(probe, *words):
    text = probe.text
    return [[text.index(word), text.index(word) + len(word)] for word in words]


def test_the_projects_probes_read_and_each_has_a_stranger():
    probes = read_probes(PROJECT_ROOT / "data" / "01_raw" / "probes" / "pronoun_probes.jsonl")
    assert len(probes) >= 30
    assert all(len(probe.entities) >= 2 for probe in probes)


def test_the_held_out_probes_read_each_has_a_stranger_and_none_is_among_the_others():
    folder = PROJECT_ROOT / "data" / "01_raw" / "probes"
    held_out = read_probes(folder / "pronoun_probes_heldout.jsonl")
    others = {probe.text for probe in read_probes(folder / "pronoun_probes.jsonl")}
    assert len(held_out) == 20
    assert all(len(probe.entities) >= 2 for probe in held_out)
    assert not {probe.text for probe in held_out} & others


def test_mentions_are_whole_words_and_at_n_is_the_nth_occurrence():
    text = "He saw the hen. Then he left, and he smiled."
    record = {"text": text, "pronoun": "he@2", "antecedent": "He", "entities": [["He", "he", "he@2"], ["the hen"]]}
    probe = parse_probe(record, "x:1")
    assert probe.pronoun == (34, 36) and text[34:36] == "he"  # the second whole-word "he", not "the" or "hen"
    assert probe.antecedent == (0, 2)  # case kept
    assert probe.entities[0][1] == (21, 23)


def test_right_wrong_merge_and_non_mention():
    probe = parse_probe(ADA, "x:1")
    right = judge_probe(probe, [spans(probe, "Charles", "He", "his"), spans(probe, "Ada", "her")])
    assert right.right and right.linked and not right.wrong_merges and not right.non_mentions
    # the README's failure: Ada's "her" and a non-mention "her his" in Charles's cluster
    merged = judge_probe(probe, [spans(probe, "Charles", "He", "her", "her his", "his")])
    assert merged.linked and not merged.right
    assert merged.strangers == ("her",) and merged.non_mentions == ("her his",) and merged.wrong_merges == 1
    # a non-mention alone in the pair's cluster is enough to be wrong; elsewhere it is only counted
    assert not judge_probe(probe, [spans(probe, "Charles", "He", "1833")]).right
    elsewhere = judge_probe(probe, [spans(probe, "Charles", "He"), spans(probe, "1833", "engine")])
    assert elsewhere.right and elsewhere.non_mentions == ("1833", "engine")
    missed = judge_probe(probe, [spans(probe, "He", "his")])  # pronouns only: not linked to Charles
    assert not missed.linked and not missed.right
    summary = summarize_probes([right, merged, missed])
    assert (summary.probes, summary.right, summary.linked, summary.wrong_merges, summary.non_mentions) == (
        3,
        1,
        2,
        1,
        1,
    )


@pytest.mark.parametrize(
    ("record", "fault"),
    [
        ({**ADA, "pronoun": "She"}, "mention 'She' is not in the text ('She' occurs 0 times)"),
        ({**ADA, "antecedent": "Ada"}, "the pronoun and the antecedent must be mentions of one listed entity"),
        ({**ADA, "entities": [["Ada", "her"]], "antecedent": "Ada", "pronoun": "her"}, "at least one other entity"),
        ({**ADA, "entities": [["Ada", "Ada"], ["Charles", "He"]]}, "a mention is listed twice"),
        ({**ADA, "colour": "red"}, "unknown key 'colour'"),
        ({**ADA, "text": 3}, "key 'text' must be a string"),
        ({**ADA, "pronoun": "He@0"}, "is not a mention"),
    ],
)
def test_a_bad_probe_is_named_by_file_and_line(record, fault, tmp_path):
    path = tmp_path / "probes.jsonl"
    path.write_text(json.dumps(ADA) + "\n\n" + json.dumps(record) + "\n")
    with pytest.raises(ProbeError) as error:
        read_probes(path)
    assert str(error.value).startswith(f"{path}:3: ") and fault in str(error.value)


def test_a_line_that_is_not_json_and_an_empty_file_are_named(tmp_path):
    path = tmp_path / "probes.jsonl"
    path.write_text("{nope\n")
    with pytest.raises(ProbeError, match=r"probes\.jsonl:1: not JSON"):
        read_probes(path)
    path.write_text("\n")
    with pytest.raises(ProbeError, match="no probes"):
        read_probes(path)


def test_another_name_or_description_of_the_antecedents_entity_links_the_pair_and_a_pronoun_does_not():
    record = {
        "text": "Oliver asked his sister Jane to read it. She read it.",
        "pronoun": "She",
        "antecedent": "his sister Jane",
        "entities": [["Oliver", "his"], ["his sister Jane", "Jane", "She"], ["it", "it@2"]],
    }
    probe = parse_probe(record, "x:1")
    assert judge_probe(probe, [spans(probe, "Jane", "She")]).right
    assert judge_probe(probe, [spans(probe, "his sister Jane", "She")]).right
    assert not judge_probe(probe, [spans(probe, "Oliver", "She")]).linked


class _AnswersFor:
    """A stand-in model: each text's clusters given as the words of each cluster."""

    def __init__(self, clusters_by_text):
        self.clusters_by_text = clusters_by_text

    def predict(self, text):
        from types import SimpleNamespace

        clusters = [[(text.index(w), text.index(w) + len(w)) for w in words] for words in self.clusters_by_text[text]]
        return SimpleNamespace(char_clusters=clusters)


def test_ask_probes_counts_each_file_by_its_name(tmp_path):
    marie = {
        "text": "Marie met Pierre. She smiled.",
        "pronoun": "She",
        "antecedent": "Marie",
        "entities": [["Marie", "She"], ["Pierre"]],
    }
    (tmp_path / "one.jsonl").write_text(json.dumps(ADA) + "\n" + json.dumps(marie) + "\n")
    (tmp_path / "two.jsonl").write_text(json.dumps(marie) + "\n")
    model = _AnswersFor(
        {
            ADA["text"]: [["Charles", "He", "his"], ["Ada", "her"]],  # right
            marie["text"]: [["Pierre", "She", "Marie"]],  # linked, with a stranger
        }
    )
    counts = ask_probes(model, [tmp_path / "one.jsonl", tmp_path / "two.jsonl"])
    assert list(counts) == ["one", "two"]
    assert counts["one"] == {
        "probes": 2,
        "right": 1,
        "right_percent": 50.0,
        "linked": 2,
        "wrong_merges": 1,
        "non_mentions": 0,
    }
    assert counts["two"]["right"] == 0 and counts["two"]["linked"] == 1


def test_ask_probes_refuses_a_missing_file_and_two_files_of_one_name_in_one_line(tmp_path):
    with pytest.raises(ProbeError, match="no_such.jsonl: no such probe file") as error:
        ask_probes(_AnswersFor({}), [tmp_path / "no_such.jsonl"])
    assert isinstance(error.value, UserError)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for folder in ("a", "b"):
        (tmp_path / folder / "probes.jsonl").write_text(json.dumps(ADA) + "\n")
    with pytest.raises(ProbeError, match="another probe file is also named 'probes'"):
        ask_probes(_AnswersFor({}), [tmp_path / "a" / "probes.jsonl", tmp_path / "b" / "probes.jsonl"])
