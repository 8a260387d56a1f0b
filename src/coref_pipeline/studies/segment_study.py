"""Xia et al.'s segment-length study (their Table 4): train at one segment length, evaluate at each.

One DVC experiment per training length (``grid_commands`` queues them: ``coref-pipeline
segment-study queue``); in each, ``evaluate`` scores dev at every inference length
(``dev_f1_at_segment_lengths``, written to ``segment_lengths_{model}_dev.json``); the
table gathers the experiments (rows: training length, columns: inference length, cells:
dev CoNLL F1) and draws it as a heat map (``coref-pipeline segment-study table``).

Lengths are :class:`~coref_pipeline.formats.segmentation.SegmentLength` labels: subtokens (``128``)
or sentences (``"5sent"``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from coref_pipeline.evaluation.predictions import HEADLINE_METRICS, GoldKey, headline_metrics, score_predictions
from coref_pipeline.formats.corpus import SegmentedCorpus
from coref_pipeline.formats.segmentation import SegmentLength
from coref_pipeline.serving.coref_model import CorefModel

logger = logging.getLogger(__name__)

# Xia et al.'s Table 4: subtokens, then sentences.
STUDY_LENGTHS: tuple[int | str, ...] = (128, 256, 384, 512, "1sent", "5sent", "10sent")
# Where each model's training keys live (params file, key prefix) for `dvc exp run -S`.
MODEL_PARAMS = {
    "incremental": ("conf/base/parameters_incremental_train.yml", "incremental_train.overrides"),
    "baseline": ("conf/base/parameters_coref_train.yml", "coref_train.overrides"),
}
SEGMENT_PARAMS = "conf/base/parameters_segment.yml:segment.max_segment_lens"
EVALUATE_PARAMS = "conf/base/parameters_evaluate.yml:evaluate.segment_lengths"


def results_path(model: str) -> str:
    """The DVC metrics file of one experiment's row (written by ``evaluate``)."""
    return f"data/08_reporting/segment_lengths_{model}_dev.json"


def table_paths(model: str, directory: str | Path = "data/08_reporting") -> tuple[Path, Path]:
    """Where ``segment-study table`` writes the table (markdown) and its heat map (PNG)."""
    return Path(directory) / f"segment_lengths_{model}.md", Path(directory) / f"segment_lengths_{model}.png"


def labels(lengths: Sequence[int | str]) -> list[int | str]:
    """The lengths as ``SegmentLength`` labels, in order, without repeats (``ValueError`` on a bad one)."""
    found: list[int | str] = []
    for length in lengths:
        label = SegmentLength.parse(length).label
        if label not in found:
            found.append(label)
    return found


def dev_f1_at_segment_lengths(
    model: CorefModel,
    corpus: SegmentedCorpus,
    key: GoldKey,
    lengths: Sequence[int | str],
    remove_singletons: bool,
    own_dev_f1: float,
) -> dict[str, Any]:
    """Dev CoNLL F1 of ``model`` at each inference length: ``{"trained_at": label, "dev_conll_f1": {label: F1}}``.

    The model's own length is ``own_dev_f1`` (``evaluate``'s figure for the same predictions);
    each other length predicts dev from the partition segmented at that length.
    """
    trained_at = model.config.segment_length
    scores: dict[str, float] = {str(trained_at): own_dev_f1}
    for label in labels(lengths):
        if label == trained_at:
            continue
        predictions = model.predict_corpus(corpus, "dev", label)
        metrics = headline_metrics(score_predictions(predictions, remove_singletons, HEADLINE_METRICS, key))
        scores[str(label)] = metrics["conll_f1"]
        logger.info("Trained at %s, read at %s: dev CoNLL F1 %.2f", trained_at, label, metrics["conll_f1"])
    return {"trained_at": str(trained_at), "dev_conll_f1": scores}


def grid_commands(
    model: str,
    train_lengths: Sequence[int | str],
    eval_lengths: Sequence[int | str],
    baseline_length: int | str,
    extra: Sequence[str] = (),
) -> list[list[str]]:
    """One ``dvc exp run --queue`` command per training length (``extra``: more ``-S`` settings).

    Every experiment segments the corpus at every length (and the baseline's), so that
    the shared stages are the same in each and DVC's run cache restores them, and keeps the
    model its training reached (``eval_on_start: false``), not its starting point.
    """
    if model not in MODEL_PARAMS:
        raise ValueError(f"model must be one of {sorted(MODEL_PARAMS)}, got {model!r}")
    params_file, prefix = MODEL_PARAMS[model]
    train, read = labels(train_lengths), labels(eval_lengths)
    segmented = labels([*train, *read, baseline_length])
    commands = []
    for label in train:
        length = SegmentLength.parse(label)
        sentences = "null" if length.sentences is None else str(length.sentences)
        command = [
            "dvc", "exp", "run", "--queue", "--name", f"seglen-{model}-{label}",
            "-S", f"{SEGMENT_PARAMS}={_yaml_list(segmented)}",
            "-S", f"{EVALUATE_PARAMS}={_yaml_list(read)}",
            "-S", f"{params_file}:++{prefix}.max_segment_len={length.subtokens}",  # ++: set, or add if absent
            "-S", f"{params_file}:++{prefix}.segment_sentences={sentences}",
            # Each row is the model trained at its length: with eval_on_start, a short budget that does
            # not beat the starting point on dev would keep the starting model, the same in every row.
            "-S", f"{params_file}:++{prefix}.eval_on_start=false",
        ]  # fmt: skip
        for setting in extra:
            command += ["-S", setting]
        commands.append(command)
    return commands


def _yaml_list(values: Sequence[int | str]) -> str:
    return "[" + ",".join(str(value) for value in values) + "]"


def study_rows(experiments: Any, model: str, read: Callable[[str, str], str | None]) -> list[dict[str, Any]]:
    """The study's rows: ``{"name", "timestamp", "trained_at", "dev_conll_f1"}`` of each experiment.

    ``experiments`` is ``dvc exp show --json`` output; ``read(rev, path)`` gives a file's text
    in a commit (``git show rev:path``) or None. The results file is committed with each
    experiment (``cache: false``); experiments without it are left out. Only finished
    experiments count: the workspace and the commits the experiments start from hold what the
    project's own ``dvc repro`` last committed, and a queued or running experiment's commit holds
    the workspace's files, not its results.
    """
    path = results_path(model)
    rows = []
    for record in _finished_experiments(experiments):
        rev = record.get("rev")
        if not rev:
            continue
        text = read(rev, path)
        if not text:
            continue
        results = json.loads(text)
        if "trained_at" not in results:
            continue
        rows.append(
            {
                "name": record.get("name") or rev,
                "timestamp": (record.get("data") or {}).get("timestamp") or "",
                "trained_at": str(results["trained_at"]),
                "dev_conll_f1": results["dev_conll_f1"],
            }
        )
    return rows


def _finished_experiments(shown: Any) -> Iterator[Mapping[str, Any]]:
    """The commit records of the finished experiments in ``dvc exp show --json`` output (DVC 3: a list of
    commits, each with ``experiments``: ``{"revs": [records], "executor": {"state": ...} or None}``)."""
    for commit in shown if isinstance(shown, list) else []:
        for experiment in (commit.get("experiments") or []) if isinstance(commit, Mapping) else []:
            executor = experiment.get("executor")
            if isinstance(executor, Mapping) and executor.get("state") not in (None, "success"):
                continue  # queued, running or failed
            yield from (record for record in experiment.get("revs") or [] if isinstance(record, Mapping))


def study_table(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Rows: training length, columns: inference length, cells: dev CoNLL F1, in the study's order.

    Of several experiments at one training length the most recent counts (a re-run).
    """
    latest: dict[str, Mapping[str, Any]] = {}
    for row in sorted(rows, key=lambda row: str(row["timestamp"])):
        latest[row["trained_at"]] = row
    if not latest:
        raise ValueError("no experiment of the segment-length study has results yet")
    table = pd.DataFrame({trained: row["dev_conll_f1"] for trained, row in latest.items()}).T
    order = [str(label) for label in STUDY_LENGTHS]
    table = table.reindex(index=_ordered(table.index, order), columns=_ordered(table.columns, order))
    table.index.name, table.columns.name = "trained at", "read at"
    return table


def _ordered(found: Sequence[str], order: Sequence[str]) -> list[str]:
    """``found`` in ``order``'s order, others after it (numbers by value)."""
    rest = sorted((item for item in found if item not in order), key=lambda item: (not item.isdigit(), item))
    return [item for item in order if item in found] + rest


def markdown_table(table: pd.DataFrame) -> str:
    """The table as GitHub markdown, F1 to 2 decimals (empty: not measured)."""
    header = "| trained at \\ read at | " + " | ".join(table.columns) + " |"
    lines = [header, "|---" * (len(table.columns) + 1) + "|"]
    for trained, row in table.iterrows():
        cells = ["" if pd.isna(value) else f"{value:.2f}" for value in row]
        lines.append(f"| {trained} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_table(table: pd.DataFrame, path: str | Path, title: str) -> None:
    """The table as a heat map with its values written in the cells (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = table.to_numpy(dtype=float)
    figure, axes = plt.subplots(figsize=(1.1 * len(table.columns) + 2.5, 0.6 * len(table.index) + 1.8))
    image = axes.imshow(values, cmap="viridis", aspect="auto")
    axes.set_xticks(range(len(table.columns)), table.columns)
    axes.set_yticks(range(len(table.index)), table.index)
    axes.set_xlabel("inference segment length (subtokens or sentences)")
    axes.set_ylabel("training segment length")
    middle = (pd.Series(values.ravel()).min() + pd.Series(values.ravel()).max()) / 2
    for row in range(values.shape[0]):
        for column in range(values.shape[1]):
            value = values[row, column]
            if value == value:  # not NaN
                colour = "black" if value > middle else "white"
                axes.text(column, row, f"{value:.1f}", ha="center", va="center", color=colour, fontsize=9)
    figure.colorbar(image, ax=axes, label="dev CoNLL F1")
    axes.set_title(title)
    figure.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
