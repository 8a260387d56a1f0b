"""Decoding rules: how the baseline's clusters are built from its antecedent scores, and what other rules give.

Run: python benchmarks/prediction/decoding_rules.py [--model data/06_models/baseline] [--margins 1 2 3]
                                                    [--probes data/01_raw/probes/pronoun_probes.jsonl]
                                                    [--jsonlines data/03_primary/jsonlines] [--out FILE]

The baseline links each kept span to its best-scoring antecedent when that beats the dummy (score 0) and, with
``overlapping_antecedents: false``, when the antecedent's cluster holds no mention overlapping the span; clusters
follow the links (``models.baseline.predicted_clusters``, the original's rule). This program scores the same model's
antecedent scores with other rules, the model and its scores unchanged, on the pronoun probes
(``pronoun_probes.py``'s judgement) and on LitBank dev and test (CoNLL F1, one-mention clusters removed, the main
job's segmented corpus ``data/03_primary/jsonlines``):

- ``best antecedent``: the model's own rule (the library's function);
- ``+ agreement``: the same, skipping an antecedent whose cluster holds an English third-person pronoun of another
  gender or number than the span's (he/him/his, she/her, it/its, they/them/their);
- ``+ agreement, pronouns linked within M``: also a personal pronoun (he, she, they and their other forms, not
  "it") takes its best agreeing antecedent when that scores above the dummy less M;
- ``pronouns linked within M``: that alone, without agreement (the middle margin given);
- ``cluster mean`` / ``cluster min``: a span joins the cluster whose mentions among its antecedents score best on
  average / at their lowest (a cluster not wholly among them counts at most 0 under ``min``), else links to a
  span of no cluster as the original does.

The rules run inside ``CorefModel``'s own prediction (its call of ``predicted_clusters`` replaced for the run), so
every other step is the library's. Figures go to stdout and to ``data/benchmarks/decoding_rules/results.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from unittest import mock

import torch

from benchmarks.common import PROBES, RESULTS, ROOT, host, write_results
from coref_pipeline.evaluation.predictions import score_predictions
from coref_pipeline.files import read_jsonlines
from coref_pipeline.serving import coref_model
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.studies.probes import ProbeError, judge_probe, read_probes, summarize_probes

MODEL = ROOT / "data" / "06_models" / "baseline"
JSONLINES = ROOT / "data" / "03_primary" / "jsonlines"

# English third-person pronouns by gender and number: two of different classes never share a cluster under
# agreement. First and second person are left out (the narrator's "I" is the "he" of the narration around a quote).
PRONOUN_CLASSES = {
    word: kind
    for kind, words in {
        "masculine": "he him his himself",
        "feminine": "she her hers herself",
        "neuter": "it its itself",
        "plural": "they them their theirs themselves",
    }.items()
    for word in words.split()
}
# Pronouns that refer to someone: linked within a margin below the dummy ("it" is often pleonastic).
PERSONAL = frozenset(word for word, kind in PRONOUN_CLASSES.items() if kind != "neuter")

Span = tuple[int, int]


@dataclass(frozen=True)
class Rule:
    """One way to build clusters from a span's antecedent scores (see the module's docstring)."""

    name: str
    agreement: bool = False
    margin: float | None = None  # personal pronouns linked when an antecedent scores above the dummy less this
    cluster_score: str | None = None  # "mean" | "min": a span joins the cluster that scores best as a whole


def span_word(subtokens: list[str], span: Span) -> str | None:
    """The lowercased word a span covers when it covers exactly one word (WordPiece continuations: ``##``)."""
    pieces = subtokens[span[0] : span[1] + 1]
    if any(not piece.startswith("##") for piece in pieces[1:]):
        return None
    return "".join(piece.removeprefix("##") for piece in pieces).lower()


def decode(
    rule: Rule,
    subtokens: list[str],
    starts: torch.Tensor,
    ends: torch.Tensor,
    antecedents: torch.Tensor,
    antecedent_scores: torch.Tensor,
) -> list[list[Span]]:
    """Clusters of subtoken spans by ``rule``; no cluster holds two overlapping mentions (as the model's own rule
    with ``overlapping_antecedents: false``). ``antecedent_scores`` ``[k, c + 1]``: the dummy first."""
    rows = torch.cat([starts.unsqueeze(1), ends.unsqueeze(1), antecedents], dim=1).tolist()  # [k, 2 + c]
    scores = antecedent_scores.float().tolist()
    spans = [(row[0], row[1]) for row in rows]
    kind_of = {span: PRONOUN_CLASSES.get(span_word(subtokens, span) or "", "") for span in spans}  # "": none
    cluster_of: dict[Span, int] = {}
    clusters: list[list[Span]] = []
    reach: list[int] = []  # each cluster's largest end: a span starting at or before it overlaps the cluster
    kinds: list[set[str]] = []  # each cluster's pronoun classes

    def join(mention: Span, antecedent: Span) -> None:
        cluster = cluster_of.get(antecedent)
        if cluster is None:
            cluster = cluster_of[antecedent] = len(clusters)
            clusters.append([antecedent])
            reach.append(antecedent[1])
            kinds.append({kind_of[antecedent]})
        cluster_of[mention] = cluster
        clusters[cluster].append(mention)
        reach[cluster] = max(reach[cluster], mention[1])
        kinds[cluster].add(kind_of[mention])

    for index, row in enumerate(rows):
        mention, dummy = spans[index], scores[index][0]
        kind = kind_of[mention]
        personal = span_word(subtokens, mention) in PERSONAL
        floor = dummy - rule.margin if rule.margin is not None and personal else dummy
        candidates = [  # the valid antecedents (a masked one scores -inf)
            (score, spans[row[2 + column]]) for column, score in enumerate(scores[index][1:]) if math.isfinite(score)
        ]
        if rule.cluster_score:
            best = _best_by_cluster(rule.cluster_score, mention, candidates, cluster_of, clusters, reach)
            if best is not None and best[0] > floor:
                join(mention, best[1])
            continue
        # the lower column first among equals (argmax's choice); the dummy wins ties
        for score, antecedent in sorted(candidates, key=lambda candidate: -candidate[0]):
            if not score > floor:
                break
            cluster = cluster_of.get(antecedent)
            if (antecedent[1] if cluster is None else reach[cluster]) >= mention[0]:
                continue  # the antecedent's cluster holds a mention overlapping this span
            if rule.agreement and kind:
                held = kinds[cluster] if cluster is not None else {kind_of[antecedent]}
                if held - {"", kind}:
                    continue  # a pronoun of another gender or number in that cluster
            join(mention, antecedent)
            break
    return clusters


def _best_by_cluster(
    how: str,
    mention: Span,
    candidates: list[tuple[float, Span]],
    cluster_of: dict[Span, int],
    clusters: list[list[Span]],
    reach: list[int],
) -> tuple[float, Span] | None:
    """The best (score, antecedent to link to) when a cluster scores as a whole: its mentions' scores among the
    candidates, their mean or their lowest (0 at most under ``min`` when some mention is not among them)."""
    options: list[tuple[float, Span]] = []
    by_cluster: dict[int, list[tuple[float, Span]]] = {}
    for score, antecedent in candidates:
        cluster = cluster_of.get(antecedent)
        if cluster is None:
            if antecedent[1] < mention[0]:
                options.append((score, antecedent))
        elif reach[cluster] < mention[0]:
            by_cluster.setdefault(cluster, []).append((score, antecedent))
    for cluster, scored in by_cluster.items():
        values = [score for score, _ in scored]
        if how == "mean":
            value = sum(values) / len(values)
        else:
            value = min(values) if len(values) == len(clusters[cluster]) else min(min(values), 0.0)
        options.append((value, scored[0][1]))
    return max(options, key=lambda option: option[0]) if options else None


def rules(margins: list[float]) -> list[Rule]:
    return [
        Rule("best antecedent (the model's own)"),
        Rule("+ agreement", agreement=True),
        *(Rule(f"+ agreement, pronouns linked within {m:g}", agreement=True, margin=m) for m in margins),
        *(Rule(f"pronouns linked within {m:g}", margin=m) for m in margins[len(margins) // 2 : len(margins) // 2 + 1]),
        Rule("cluster mean", cluster_score="mean"),
        Rule("cluster min", cluster_score="min"),
    ]


def decoding(model: CorefModel, rule: Rule) -> mock._patch | None:
    """Replace the decoding ``CorefModel`` calls for ``rule`` (None: the model's own), recording each document's
    subtokens as the model reads it."""
    if rule.agreement is False and rule.margin is None and rule.cluster_score is None:
        return None
    subtokens: list[str] = []
    tensorize: Callable[..., Any] = model.tensorize

    def reading(document: dict, *args: Any, **kwargs: Any) -> Any:
        subtokens[:] = [subtoken for sentence in document["sentences"] for subtoken in sentence]
        return tensorize(document, *args, **kwargs)

    model.tensorize = reading  # type: ignore[method-assign]

    def rule_clusters(starts, ends, antecedents, antecedent_scores, overlapping=True):  # noqa: ANN001, ANN202
        return decode(rule, subtokens, starts, ends, antecedents, antecedent_scores)

    return mock.patch.object(coref_model, "predicted_clusters", rule_clusters)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=MODEL, help="a baseline model directory")
    parser.add_argument("--probes", type=Path, default=PROBES, help="a probe file (jsonlines)")
    parser.add_argument("--jsonlines", type=Path, default=JSONLINES, help="the segmented corpus's folder")
    parser.add_argument("--margins", type=float, nargs="+", default=[1.0, 2.0, 3.0])
    parser.add_argument("--out", type=Path, default=RESULTS / "decoding_rules" / "results.json")
    args = parser.parse_args()
    try:
        probes = read_probes(args.probes)
    except (ProbeError, OSError) as error:
        sys.exit(str(error))
    splits = {}
    for split in ("dev", "test"):
        path = args.jsonlines / f"{split}.english.384.jsonlines"
        if not path.exists():
            sys.exit(f"{path} is missing: run the main job first (README), or name another folder with --jsonlines")
        splits[split] = list(read_jsonlines(path))
    results: dict = {"host": host(), "model": str(args.model), "probes": str(args.probes), "rules": []}
    print(f"{'rule':45} probes right  linked  wrong merges  non-mentions  dev F1  test F1")
    for rule in rules(args.margins):
        model = CorefModel.load(args.model)
        if model.model_type != "baseline":
            sys.exit(f"{args.model} is a {model.model_type} model: the rules are the baseline's decoding")
        patch = decoding(model, rule)
        if patch is not None:
            patch.start()
        try:
            answers = [model.predict(probe.text) for probe in probes]
            summary = summarize_probes(
                [judge_probe(probe, answer.char_clusters) for probe, answer in zip(probes, answers, strict=True)]
            )
            f1 = {
                split: round(
                    100
                    * score_predictions(
                        model.predict_documents(documents, progress=False, max_tokens_in_batch=0),
                        remove_singletons=True,
                    ).conll_f1,
                    2,
                )
                for split, documents in splits.items()
            }
        finally:
            if patch is not None:
                patch.stop()
        print(
            f"{rule.name:45} {summary.right:>3} of {summary.probes:<4} {summary.linked:>6}  "
            f"{summary.wrong_merges:>12}  {summary.non_mentions:>12}  {f1['dev']:>6.2f}  {f1['test']:>7.2f}",
            flush=True,
        )
        results["rules"].append(
            {"rule": rule.name, **summary.to_dict(), "dev_conll_f1": f1["dev"], "test_conll_f1": f1["test"]}
        )
    print(f"host: {results['host']}")
    write_results(results, args.out)


if __name__ == "__main__":
    main()
