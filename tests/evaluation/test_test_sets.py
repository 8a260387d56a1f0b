"""Named test sets: reading and checking them, WinoBias's files and figures, the summary over models and sets."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from coref_pipeline.evaluation.predictions import gold_key, headline_metrics, score_predictions
from coref_pipeline.evaluation.test_sets import (
    PRONOUNS_LINKED,
    WINOBIAS_PARTS,
    TestSetError,
    pronoun_links,
    read_test_sets,
    set_order,
    summary_markdown,
    summary_table,
    winobias_summary,
    winobias_table,
)


def winobias_document(key: str, words: list[str], marks: dict[int, str]) -> str:
    """One sentence as Zhao et al. distribute it: 15 columns, the coreference marks in the last."""
    rows = [f"#begin document ({key}); part 000"]
    for index, word in enumerate(words):
        columns = [key, "0", str(index), word, "-", "-", "-", "-", "-", "Speaker#1", "*", "*", "*", "*"]
        rows.append("\t".join([*columns, marks.get(index, "-")]))
    return "\n".join(rows) + "\n\n#end document\n"


# "The janitor reprimanded the accountant because she made a mistake ." with the key cluster
# {the accountant (3-4), she (6)}; the second sentence's cluster has two pronouns.
FIRST = ["The", "janitor", "reprimanded", "the", "accountant", "because", "she", "made", "a", "mistake", "."]
SECOND = ["The", "nurse", "met", "the", "driver", "and", "thanked", "him", "for", "his", "help", "."]
KEY = {"first": [[(3, 4), (6, 6)]], "second": [[(3, 4), (7, 7), (9, 9)]]}


def write_winobias(folder: Path, kind: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for part, name in WINOBIAS_PARTS.items():
        text = winobias_document(f"nw/{kind}/{part}//0", FIRST, {3: "(0", 4: "0)", 6: "(0)"})
        text += winobias_document(f"nw/{kind}/{part}//1", SECOND, {3: "(0", 4: "0)", 7: "(0)", 9: "(0)"})
        (folder / name).write_text(text, encoding="utf-8")


def test_winobias_files_in_the_distributed_format_are_read_as_four_sets(tmp_path):
    write_winobias(tmp_path / "wb", "test")
    sets = read_test_sets({"wb": {"path": str(tmp_path / "wb"), "kind": "winobias"}}, remove_singletons=False)
    assert [s.name for s in sets] == [f"wb.{part}" for part in WINOBIAS_PARTS]
    assert {s.winobias for s in sets} == {"wb"} and not any(s.remove_singletons for s in sets)
    key = gold_key(sets[0].gold).clusters
    assert key == {"nw/test/type1_pro//0_0": KEY["first"], "nw/test/type1_pro//1_0": KEY["second"]}


def prediction(doc_key: str, words: list[str], clusters: list[list[tuple[int, int]]]) -> dict:
    """A jsonlines document with word-level predicted clusters (one subtoken a word)."""
    return {
        "doc_key": doc_key,
        "sentences": [words],
        "subtoken_map": list(range(len(words))),
        "predicted_clusters": [[list(span) for span in cluster] for cluster in clusters],
    }


def test_the_four_figures_and_the_two_gaps_by_hand(tmp_path):
    write_winobias(tmp_path / "wb", "test")
    sets = {
        s.name.split(".")[1]: s
        for s in read_test_sets({"wb": {"path": str(tmp_path / "wb"), "kind": "winobias"}}, False)
    }
    exact = {"first": KEY["first"], "second": KEY["second"]}
    responses = {
        "type1_pro": exact,  # everything right: CoNLL F1 100, every pronoun linked
        "type1_anti": {"first": [], "second": []},  # nothing: 0, none linked
        "type2_pro": {"first": exact["first"], "second": []},  # the first sentence only
        "type2_anti": {"first": exact["first"], "second": [[(3, 4), (9, 9)], [(0, 1), (7, 7)]]},
    }
    parts = {}
    for part, clusters in responses.items():
        gold = sets[part].gold
        keys = {key.rsplit("//", 1)[1][0]: key for key in gold_key(gold).clusters}
        words = {"0": FIRST, "1": SECOND}
        documents = [prediction(keys[n], words[n], clusters[name]) for n, name in (("0", "first"), ("1", "second"))]
        metrics = headline_metrics(score_predictions(documents, False, key=gold_key(gold)))
        predicted = {
            document["doc_key"]: [[tuple(s) for s in c] for c in document["predicted_clusters"]]
            for document in documents
        }
        linked, pronouns = pronoun_links(gold_key(gold).clusters, predicted)
        parts[part] = {**metrics, PRONOUNS_LINKED: 100 * linked / pronouns}
    # type2_pro, by hand: the key's 2 entities (5 mentions, 3 links), the response holds the first exactly.
    # MUC R 1/3 P 1/1; B3 R 2/5 P 2/2; CEAF-e (phi4) R 1/2 P 1/1 -> F1 1/2, 4/7, 2/3.
    type2_pro = 100 * (2 * (1 / 3) / (1 / 3 + 1) + 2 * 0.4 / 1.4 + 2 * 0.5 / 1.5) / 3
    assert parts["type2_pro"]["conll_f1"] == pytest.approx(type2_pro, abs=1e-3)

    # type2_anti: the first sentence right; in the second, "his" (9) with the driver (3-4), "him" (7) with
    # "The nurse" (0-1). MUC R (1 + 1)/(1 + 2), P (1 + 1 + 0)/3. B3 R (2 + (4 + 1)/3)/5, P (2 + 4/2 + 1/2)/6.
    # CEAF-e: the second key entity best with {driver, his}, phi4 = 2*2/5; R (1 + 0.8)/2, P (1 + 0.8)/3.
    def f1(recall: float, precision: float) -> float:
        return 2 * recall * precision / (recall + precision)

    type2_anti = 100 * (f1(2 / 3, 2 / 3) + f1(11 / 15, 4.5 / 6) + f1(0.9, 0.6)) / 3
    assert parts["type2_anti"]["conll_f1"] == pytest.approx(type2_anti, abs=1e-3)
    assert parts["type1_pro"]["conll_f1"] == 100.0 and parts["type1_anti"]["conll_f1"] == 0.0
    # Pronouns linked to their occupation: 3 in each part (she; him, his).
    assert [parts[p][PRONOUNS_LINKED] for p in WINOBIAS_PARTS] == pytest.approx([100, 0, 100 / 3, 200 / 3])
    table = winobias_table(parts)
    assert table["type1_pro"] == 100 and table["type1_anti"] == 0
    assert table["type1_avg"] == 50 and table["type1_diff"] == 100
    assert table["type2_avg"] == pytest.approx((type2_pro + type2_anti) / 2, abs=1e-3)
    assert table["type2_diff"] == pytest.approx(type2_pro - type2_anti, abs=1e-3)
    assert table["type2_linked_diff"] == pytest.approx(100 / 3 - 200 / 3)


def test_pronoun_links_count_each_pronoun_with_its_occupation():
    key = {"d": [[(3, 4), (7, 7), (9, 9)]]}
    assert pronoun_links(key, {"d": [[(3, 4), (7, 7)], [(9, 9), (0, 1)]]}) == (1, 2)
    assert pronoun_links(key, {"d": [[(3, 4), (7, 7), (9, 9), (0, 1)]]}) == (2, 2)  # extra mentions do not matter
    assert pronoun_links(key, {"d": [[(4, 4), (7, 7), (9, 9)]]}) == (0, 2)  # the occupation's exact span only
    assert pronoun_links(key, {}) == (0, 2)


def test_a_missing_or_malformed_set_is_one_line_naming_the_set_and_the_file(tmp_path):
    with pytest.raises(TestSetError, match=r"test set 'other': .*nope\.conll: no such file"):
        read_test_sets({"other": {"path": str(tmp_path / "nope.conll")}}, False)
    bad = tmp_path / "bad.conll"
    bad.write_text("#begin document (d); part 000\nd\t0\t0\tword\n#end document\n", encoding="utf-8")
    with pytest.raises(TestSetError, match=r"test set 'bad': .*bad\.conll:2: ") as error:
        read_test_sets({"bad": {"path": str(bad)}}, False)
    assert "\n" not in str(error.value)
    (tmp_path / "wb").mkdir()
    with pytest.raises(TestSetError, match=r"test set 'wb': .*test_type1_pro_stereotype\.v4_auto_conll: no such file"):
        read_test_sets({"wb": {"path": str(tmp_path / "wb"), "kind": "winobias"}}, False)
    with pytest.raises(TestSetError, match=r"evaluate.test_sets.x: unknown test set key\(s\) \['singletons'\]"):
        read_test_sets({"x": {"path": str(bad), "singletons": True}}, False)
    with pytest.raises(TestSetError, match="'kind' must be one of"):
        read_test_sets({"x": {"path": str(bad), "kind": "ontonotes"}}, False)
    with pytest.raises(TestSetError, match="is not a set name"):
        read_test_sets({"a.b": {"path": str(bad)}}, False)
    with pytest.raises(TestSetError, match="is not a set name"):
        read_test_sets({"test": {"path": str(bad)}}, False)  # the corpus's own test has that name
    with pytest.raises(TestSetError, match="holds no CoNLL file"):
        read_test_sets({"empty": {"path": str(tmp_path / "wb")}}, False)


def test_a_folder_set_is_every_conll_file_in_it_and_singletons_follow_the_set(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.v4_gold_conll").write_text(winobias_document("a", FIRST, {3: "(0", 4: "0)", 6: "(0)"}))
    (folder / "b.conll").write_text(winobias_document("b", SECOND, {1: "(1)"}))
    (folder / "notes.txt").write_text("not read")
    sets = read_test_sets(
        {"corpus": {"path": str(folder), "remove_singletons": True}, "one": {"path": str(folder / "b.conll")}}, False
    )
    assert [(s.name, s.remove_singletons) for s in sets] == [("corpus", True), ("one", False)]
    assert set(gold_key(sets[0].gold).clusters) == {"a_0", "b_0"}
    (folder / "c.conll").write_text(winobias_document("a", FIRST, {}))  # a document of a.v4_gold_conll again
    with pytest.raises(
        TestSetError, match=r"test set 'corpus': document a_0 is in both .*a\.v4_gold_conll and .*c\.conll"
    ):
        read_test_sets({"corpus": {"path": str(folder)}}, False)


def test_the_summary_puts_every_model_on_every_set_in_configuration_order():
    configured = {"litbank": {"path": "x"}, "wb": {"path": "y", "kind": "winobias"}}
    order = set_order(configured)
    assert order == ["test", "litbank", *(f"wb.{part}" for part in WINOBIAS_PARTS)]

    def figures(base: float) -> dict[str, float]:
        return {"conll_f1": base, "muc_f1": base + 1, "bcub_f1": base + 2, "ceafe_f1": base + 3, "lea_f1": base + 4}

    results = {
        "baseline": {"litbank": figures(40), "test": figures(50)},
        "incremental": {"test": figures(51), "litbank": figures(41)},
    }
    table = summary_table(results, order)
    assert table[["model", "set", "conll_f1", "lea_f1"]].values.tolist() == [
        ["baseline", "test", 50, 54],
        ["baseline", "litbank", 40, 44],
        ["incremental", "test", 51, 55],
        ["incremental", "litbank", 41, 45],
    ]
    markdown = summary_markdown(table)
    assert markdown.splitlines()[0] == "| model | test | litbank |"
    assert (
        "| baseline | **50.00** (51.00 / 52.00 / 53.00 / 54.00) | **40.00** (41.00 / 42.00 / 43.00 / 44.00) |"
        in markdown
    )
    assert winobias_summary(results).empty
    parts = {
        f"wb.{part}": {**figures(value), PRONOUNS_LINKED: value}
        for part, value in zip(WINOBIAS_PARTS, (80, 60, 70, 65), strict=True)
    }
    wino = winobias_summary({"baseline": {**results["baseline"], **parts}})
    assert wino[["set", "type1_avg", "type1_diff", "type2_avg", "type2_diff"]].values.tolist() == [
        ["wb", 70, 20, 67.5, 5]
    ]
    assert not math.isnan(wino["type2_linked_diff"].iloc[0])
