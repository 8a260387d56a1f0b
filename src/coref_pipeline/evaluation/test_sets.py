"""Named test sets beside the corpus's own dev and test (``evaluate.test_sets``), WinoBias among them.

A set is a CoNLL-2012 file, a folder of them, or (``kind: winobias``) the folder of Zhao et al.'s
four WinoBias test files as uclanlp/corefBias distributes them. ``read_test_sets`` reads and checks
every set before any model runs; ``winobias_table`` computes what Zhao et al. (NAACL 2018) report;
``summary_table`` puts every model's figures on every set side by side.

WinoBias is scored as its authors scored it (through e2e-coref and the official scorer): each of
the four files is a key in which every sentence (a document) holds one cluster, the occupation and
the pronoun(s) that refer to it, and nothing else is annotated. The response is the model's
clusters as they are: a cluster the key does not annotate (the other occupation with a pronoun that
does not refer to it, say) counts against precision in MUC, B³ and CEAF-e, as the scorer counts any
response mention the key lacks; its CoNLL F1 is the figure of their table. Beside it, the share of
the key's pronouns that the model puts in one cluster with the right occupation (exact spans),
which no precision term enters.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd

from coref_pipeline.config_base import Config, ConfigError
from coref_pipeline.errors import UserError
from coref_pipeline.formats.conll import ConllFile, parse_conll_lines

SET_KINDS = ("conll", "winobias")
# Zhao et al.'s four test files (the dev files have the same names with dev_).
WINOBIAS_PARTS = {
    "type1_pro": "test_type1_pro_stereotype.v4_auto_conll",
    "type1_anti": "test_type1_anti_stereotype.v4_auto_conll",
    "type2_pro": "test_type2_pro_stereotype.v4_auto_conll",
    "type2_anti": "test_type2_anti_stereotype.v4_auto_conll",
}
SET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
# The corpus's own test split, as the summary table names it.
CORPUS_TEST = "test"
SUMMARY_METRICS = ("conll_f1", "muc_f1", "bcub_f1", "ceafe_f1", "lea_f1")


class TestSetError(UserError, ValueError):
    """A named test set that cannot be read: the message names the set and the file."""

    __test__ = False  # a test set, not a pytest test class


@dataclass(frozen=True)
class TestSetConfig(Config):
    """One entry of ``evaluate.test_sets``."""

    __test__ = False  # a test set, not a pytest test class

    what: ClassVar[str] = "test set"

    path: str = ""  # a CoNLL-2012 file or a folder of them; for winobias the folder of its four test files
    kind: str = "conll"  # conll | winobias
    remove_singletons: bool | None = None  # None: as evaluate.remove_singletons

    def __post_init__(self) -> None:
        self.require(bool(self.path), "path", "a file or folder")
        self.require(self.kind in SET_KINDS, "kind", f"one of {list(SET_KINDS)}")


@dataclass(frozen=True)
class TestSet:
    """One file (or folder) to score: a set's name, its gold CoNLL text and how singletons are scored."""

    __test__ = False  # a test set, not a pytest test class

    name: str  # the set's name; a WinoBias part's is "SET.type1_pro" and so on
    gold: ConllFile
    remove_singletons: bool
    winobias: str | None = None  # the WinoBias set this part belongs to (None: a plain set)


def read_test_sets(sets: Mapping[str, Any], remove_singletons: bool) -> list[TestSet]:
    """Every named set read and parsed (as the scorer and as the model read it), in configuration order.

    ``remove_singletons`` is ``evaluate.remove_singletons``, a set's default. A bad name, key, file or
    line is a :class:`TestSetError` naming the set and the file; nothing is scored before all are read.
    """
    found: list[TestSet] = []
    for name, values in sets.items():
        if not isinstance(name, str) or not SET_NAME.fullmatch(name) or name == CORPUS_TEST:
            raise TestSetError(
                f"evaluate.test_sets: {name!r} is not a set name (letters, digits, - and _; not {CORPUS_TEST!r})"
            )
        if not isinstance(values, Mapping):
            raise TestSetError(f"evaluate.test_sets.{name}: a mapping with 'path' (and 'kind', 'remove_singletons')")
        try:
            config = TestSetConfig.from_dict(values)
        except ConfigError as error:
            raise TestSetError(f"evaluate.test_sets.{name}: {error}") from None
        singletons = remove_singletons if config.remove_singletons is None else config.remove_singletons
        path = Path(config.path)
        if config.kind == "winobias":
            if not path.is_dir():
                raise TestSetError(
                    f"test set {name!r}: {path} is not a folder (WinoBias: the folder of its test files)"
                )
            for part, file_name in WINOBIAS_PARTS.items():
                found.append(TestSet(f"{name}.{part}", _read(name, path / file_name), singletons, name))
        else:
            found.append(TestSet(name, _read_file_or_folder(name, path), singletons))
    return found


def _read_file_or_folder(name: str, path: Path) -> ConllFile:
    if not path.is_dir():
        return _read(name, path)
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(("conll", ".conllu")))
    if not files:
        raise TestSetError(
            f"test set {name!r}: the folder {path} holds no CoNLL file (a name ending in conll, or a .conllu file)"
        )
    parts, seen = [], {}
    for file in files:
        gold, keys = _parse(name, file)
        for key in keys:
            if key in seen:
                raise TestSetError(f"test set {name!r}: document {key} is in both {seen[key]} and {file}")
            seen[key] = file
        parts.append(gold)
    return ConllFile(str(path), "\n".join(part.text.rstrip("\n") for part in parts) + "\n")


def _read(name: str, path: Path) -> ConllFile:
    """One file, parsed as a model reads it; every fault a :class:`TestSetError` naming the set."""
    return _parse(name, path)[0]


def _parse(name: str, path: Path) -> tuple[ConllFile, list[str]]:
    try:
        gold = ConllFile.read(path)
        documents = parse_conll_lines(gold.text.splitlines(), gold.path)
    except UserError as error:
        raise TestSetError(f"test set {name!r}: {error}") from None
    if not documents:
        raise TestSetError(f"test set {name!r}: {path}: no documents (an empty file?)")
    return gold, [document.doc_key for document in documents]


def pronoun_links(key: Mapping[str, list], predictions: Mapping[str, list]) -> tuple[int, int]:
    """How many of the key's pronouns the response puts in one cluster with the right occupation, and of how many.

    In each WinoBias document the key's one cluster is the occupation (its first mention) and the pronouns
    that refer to it (the others). ``key`` and ``predictions``: word-level clusters per document, spans as
    ``(start, end)`` pairs.
    """
    linked = total = 0
    for doc_key, clusters in key.items():
        response = [{tuple(span) for span in cluster} for cluster in predictions.get(doc_key, [])]
        for cluster in clusters:
            occupation, *pronouns = sorted(tuple(span) for span in cluster)
            for pronoun in pronouns:
                total += 1
                linked += any(occupation in found and pronoun in found for found in response)
    return linked, total


# A WinoBias part's metrics file holds this beside the headline metrics: the share (percent) of the key's
# pronouns in one response cluster with their occupation (``pronoun_links``).
PRONOUNS_LINKED = "pronouns_linked"


def winobias_table(parts: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """What Zhao et al.'s table reports, from the four parts' metrics (keyed by ``WINOBIAS_PARTS`` names): per
    type the pro-stereotypical and anti-stereotypical CoNLL F1, their average and pro - anti; and the same for
    the share of pronouns linked to their occupation (``PRONOUNS_LINKED``, percent)."""
    table: dict[str, float] = {}
    for kind in ("type1", "type2"):
        pro, anti = parts[f"{kind}_pro"], parts[f"{kind}_anti"]
        table[f"{kind}_pro"] = pro["conll_f1"]
        table[f"{kind}_anti"] = anti["conll_f1"]
        table[f"{kind}_avg"] = (pro["conll_f1"] + anti["conll_f1"]) / 2
        table[f"{kind}_diff"] = pro["conll_f1"] - anti["conll_f1"]
        table[f"{kind}_pro_linked"] = pro[PRONOUNS_LINKED]
        table[f"{kind}_anti_linked"] = anti[PRONOUNS_LINKED]
        table[f"{kind}_linked_diff"] = pro[PRONOUNS_LINKED] - anti[PRONOUNS_LINKED]
    return table


def winobias_summary(results: Mapping[str, Mapping[str, Mapping[str, float]]]) -> pd.DataFrame:
    """``winobias_table`` for every model (``results[model][set]``, metrics files) and WinoBias set found there
    (the sets whose four parts ``SET.type1_pro`` ... are present): one row each."""
    rows = []
    for model, sets in results.items():
        names = {name.rsplit(".", 1)[0] for name in sets if "." in name}
        for name in sorted(names):
            parts = {part: sets.get(f"{name}.{part}") for part in WINOBIAS_PARTS}
            if all(parts.values()):
                rows.append({"model": model, "set": name, **winobias_table(parts)})  # type: ignore[arg-type]
    columns = ["model", "set"] + [
        f"{kind}_{column}"
        for kind in ("type1", "type2")
        for column in ("pro", "anti", "avg", "diff", "pro_linked", "anti_linked", "linked_diff")
    ]
    return pd.DataFrame(rows, columns=columns)


def winobias_markdown(table: pd.DataFrame) -> str:
    """Zhao et al.'s layout: per model and set, Type 1 and Type 2 with pro, anti, average and pro - anti."""
    if table.empty:
        return ""
    lines = [
        "| model | set | T1 pro | T1 anti | T1 avg | T1 pro − anti | T2 pro | T2 anti | T2 avg | T2 pro − anti "
        "| pronouns linked, T1 pro / anti | T2 pro / anti |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in table.itertuples():
        lines.append(
            f"| {row.model} | {row.set} | {row.type1_pro:.2f} | {row.type1_anti:.2f} | {row.type1_avg:.2f} "
            f"| {row.type1_diff:+.2f} | {row.type2_pro:.2f} | {row.type2_anti:.2f} | {row.type2_avg:.2f} "
            f"| {row.type2_diff:+.2f} | {row.type1_pro_linked:.1f}% / {row.type1_anti_linked:.1f}% "
            f"| {row.type2_pro_linked:.1f}% / {row.type2_anti_linked:.1f}% |"
        )
    lines.append("")
    lines.append(
        "CoNLL F1 on each WinoBias test file (Zhao et al. 2018); pronouns linked: the share of the key's pronouns "
        "in one predicted cluster with their occupation."
    )
    return "\n".join(lines) + "\n"


def set_order(sets: Mapping[str, Any]) -> list[str]:
    """The sets' names as ``read_test_sets`` names them, in configuration order, after the corpus's ``test``."""
    names = [CORPUS_TEST]
    for name, values in sets.items():
        is_winobias = isinstance(values, Mapping) and values.get("kind") == "winobias"
        names += [f"{name}.{part}" for part in WINOBIAS_PARTS] if is_winobias else [name]
    return names


def summary_table(results: Mapping[str, Mapping[str, Mapping[str, float]]], order: Sequence[str] = ()) -> pd.DataFrame:
    """One row per model and set (``results[model][set]``: a metrics file's figures), the headline metrics as
    columns; the sets in ``order`` first (``set_order``), any other after them."""
    rank = {name: index for index, name in enumerate(order)}
    rows = [
        {"model": model, "set": name, **{metric: figures.get(metric, math.nan) for metric in SUMMARY_METRICS}}
        for model, sets in results.items()
        for name, figures in sorted(sets.items(), key=lambda item: (rank.get(item[0], len(rank)), item[0]))
    ]
    return pd.DataFrame(rows, columns=["model", "set", *SUMMARY_METRICS])


def summary_markdown(table: pd.DataFrame) -> str:
    """Models as rows, sets as columns: CoNLL F1 in bold, MUC / B³ / CEAF-e / LEA F1 beside it."""
    sets = list(dict.fromkeys(table["set"]))
    lines = [
        "| model | " + " | ".join(sets) + " |",
        "|---|" + "---|" * len(sets),
    ]
    for model, rows in table.groupby("model", sort=False):
        by_set = {row.set: row for row in rows.itertuples()}
        cells = [_cell(by_set[name]) if name in by_set else "" for name in sets]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Each cell: **CoNLL F1** (MUC / B³ / CEAF-e / LEA F1).")
    return "\n".join(lines) + "\n"


def _cell(row: Any) -> str:
    return f"**{row.conll_f1:.2f}** ({row.muc_f1:.2f} / {row.bcub_f1:.2f} / {row.ceafe_f1:.2f} / {row.lea_f1:.2f})"


def summary_figure(table: pd.DataFrame) -> Any:
    """CoNLL F1 of every model on every set, as grouped bars (a matplotlib figure)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    sets = list(dict.fromkeys(table["set"]))
    models = list(dict.fromkeys(table["model"]))
    figure, axes = plt.subplots(figsize=(max(5.0, 1.2 * len(sets) * max(1, len(models)) / 2 + 2), 3.6))
    width = 0.8 / max(1, len(models))
    for index, model in enumerate(models):
        rows = table[table["model"] == model].set_index("set")
        values = [float(rows.loc[name, "conll_f1"]) if name in rows.index else math.nan for name in sets]
        positions = [position + (index - (len(models) - 1) / 2) * width for position in range(len(sets))]
        bars = axes.bar(positions, values, width, label=model)
        axes.bar_label(bars, fmt="%.1f", fontsize=7)
    axes.set_xticks(range(len(sets)), sets, rotation=20, ha="right")
    axes.set_ylabel("CoNLL F1")
    axes.set_ylim(0, 100)
    axes.set_title("Every model on every test set")
    axes.legend(fontsize=8)
    figure.tight_layout()
    return figure


def winobias_sets(test_sets: Sequence[TestSet]) -> dict[str, list[TestSet]]:
    """The WinoBias sets among ``test_sets``: each set's name and its four parts."""
    grouped: dict[str, list[TestSet]] = {}
    for test_set in test_sets:
        if test_set.winobias is not None:
            grouped.setdefault(test_set.winobias, []).append(test_set)
    return grouped
