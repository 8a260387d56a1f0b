"""Pronoun probes: short texts that ask a model for the obvious, and catch it merging strangers.

A probe is one short text with an unambiguous pronoun and its antecedent, and every mention of the
text listed by entity (the pair's entity and at least one other: a second person, a place, an
object). It is read from a jsonlines file, one probe a line::

    {"text": "Ada met Charles in 1833. He showed her his engine.", "pronoun": "He", "antecedent": "Charles",
     "entities": [["Ada", "her"], ["Charles", "He", "his"], ["his engine"]]}

A mention is written as it appears in the text, whole words, case-sensitive; ``"he@2"`` is the second
occurrence of ``he``. A model's clusters for the text (character spans) are judged by
:func:`judge_probe`: the pair is **linked** when the pronoun's cluster holds the antecedent or another
listed mention of its entity that is no pronoun (a name or a description: "Jane" for "his sister
Jane"); the probe is **right** when the pair is linked and that cluster holds nothing else than
mentions of their entity: no mention of another entity (a **wrong merge**) and no span that is no
listed mention (a **non-mention**, such as "her his"). Wrong merges and non-mentions are also counted
anywhere in the text.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from coref_pipeline.errors import UserError, shown_path

logger = logging.getLogger(__name__)

CharSpan = tuple[int, int]

_OCCURRENCE_RE = re.compile(r"^(.*?)(?:@(\d+))?$", re.DOTALL)

# English personal, possessive and reflexive pronouns: a mention written as one of these is no antecedent.
PRONOUNS = frozenset(
    "i me my mine myself we us our ours ourselves you your yours yourself yourselves he him his himself she her "
    "hers herself it its itself they them their theirs themselves one".split()
)


class ProbeError(UserError, ValueError):
    """A probe file that cannot be read: the message names the file, the line and the fault."""


@dataclass(frozen=True)
class Probe:
    """One short text, its pronoun and antecedent (character spans), and its mentions by entity."""

    text: str
    pronoun: CharSpan
    antecedent: CharSpan
    entities: tuple[tuple[CharSpan, ...], ...]
    source: str = ""  # "file:line", for messages

    def nominal_mentions(self) -> frozenset[CharSpan]:
        """The antecedent and every other mention of its entity that is no pronoun."""
        entity = self.entities[self.entity_of(self.antecedent)]
        nominal = {span for span in entity if self.text[span[0] : span[1]].lower() not in PRONOUNS}
        return frozenset(nominal | {self.antecedent})

    def entity_of(self, span: CharSpan) -> int | None:
        """The index of the entity ``span`` is a listed mention of, or None."""
        for index, mentions in enumerate(self.entities):
            if span in mentions:
                return index
        return None


@dataclass(frozen=True)
class ProbeJudgement:
    """How a model's clusters answer one probe."""

    linked: bool  # the pronoun shares a cluster with the antecedent (or a nominal mention of its entity)
    strangers: tuple[str, ...]  # in that cluster: mentions of another entity
    pair_non_mentions: tuple[str, ...]  # in that cluster: spans that are no listed mention
    non_mentions: tuple[str, ...]  # in any cluster: spans that are no listed mention
    wrong_merges: int  # clusters that hold mentions of two or more entities
    clusters: tuple[tuple[str, ...], ...] = ()  # the model's clusters as strings

    @property
    def right(self) -> bool:
        """The pair shares a cluster that holds only mentions of its entity."""
        return self.linked and not self.strangers and not self.pair_non_mentions


def find_mention(text: str, written: str, where: str) -> CharSpan:
    """The character span of a mention written as ``words`` or ``words@N`` (its N-th whole-word occurrence)."""
    match = _OCCURRENCE_RE.match(written)
    words, nth = match.group(1), int(match.group(2) or 1)
    if not words.strip() or nth < 1:
        raise ProbeError(f"{where}: {written!r} is not a mention (words, or words@N with N from 1)")
    found = [m.span() for m in re.finditer(rf"(?<!\w){re.escape(words)}(?!\w)", text)]
    if len(found) < nth:
        times = f"{len(found)} time{'s' if len(found) != 1 else ''}"
        raise ProbeError(f"{where}: mention {written!r} is not in the text ({words!r} occurs {times})")
    return found[nth - 1]


def parse_probe(record: Mapping[str, Any], where: str) -> Probe:
    """One probe from its JSON object; a missing key or a mention not in the text is a :class:`ProbeError`."""
    if not isinstance(record, Mapping):
        raise ProbeError(f"{where}: a probe is a JSON object, not {type(record).__name__}")
    unknown = set(record) - {"text", "pronoun", "antecedent", "entities"}
    if unknown:
        raise ProbeError(f"{where}: unknown key {sorted(unknown)[0]!r} (text, pronoun, antecedent, entities)")
    for key in ("text", "pronoun", "antecedent"):
        if not isinstance(record.get(key), str):
            raise ProbeError(f"{where}: key {key!r} must be a string")
    entities = record.get("entities")
    if not isinstance(entities, list) or not all(isinstance(e, list) and e for e in entities):
        raise ProbeError(f"{where}: key 'entities' must be a list of non-empty lists of mentions")
    text = record["text"]
    spans = tuple(tuple(find_mention(text, str(m), where) for m in mentions) for mentions in entities)
    probe = Probe(
        text,
        find_mention(text, record["pronoun"], where),
        find_mention(text, record["antecedent"], where),
        spans,
        where,
    )
    listed = [span for mentions in spans for span in mentions]
    if len(set(listed)) != len(listed):
        raise ProbeError(f"{where}: a mention is listed twice")
    pair = {probe.entity_of(probe.pronoun), probe.entity_of(probe.antecedent)}
    if len(pair) != 1 or None in pair:
        raise ProbeError(f"{where}: the pronoun and the antecedent must be mentions of one listed entity")
    if len(spans) < 2:
        raise ProbeError(f"{where}: a probe needs at least one other entity beside the pair's")
    return probe


def read_probes(path: str | Path) -> list[Probe]:
    """Every probe of a jsonlines file (blank lines skipped); faults name the file and the line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ProbeError(f"{shown_path(path)}: no such probe file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ProbeError(f"{shown_path(path)}: cannot be read as UTF-8 text ({error})") from None
    probes = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ProbeError(f"{where}: not JSON ({error.msg})") from None
        probes.append(parse_probe(record, where))
    if not probes:
        raise ProbeError(f"{path}: no probes")
    return probes


def judge_probe(probe: Probe, char_clusters: Iterable[Sequence[Sequence[int]]]) -> ProbeJudgement:
    """Judge a model's clusters (character spans, end exclusive) for one probe."""
    clusters = [[(int(start), int(end)) for start, end in cluster] for cluster in char_clusters]
    pair_entity = probe.entity_of(probe.antecedent)
    nominal = probe.nominal_mentions()
    linked, strangers, pair_non_mentions = False, [], []
    non_mentions, wrong_merges = [], 0
    for cluster in clusters:
        entities = {probe.entity_of(span) for span in cluster}
        unlisted = [probe.text[start:end] for start, end in cluster if probe.entity_of((start, end)) is None]
        non_mentions += unlisted
        wrong_merges += len(entities - {None}) > 1
        if probe.pronoun in cluster and nominal.intersection(cluster):
            linked = True
            strangers = [probe.text[s:e] for s, e in cluster if probe.entity_of((s, e)) not in (pair_entity, None)]
            pair_non_mentions = unlisted
    return ProbeJudgement(
        linked,
        tuple(strangers),
        tuple(pair_non_mentions),
        tuple(non_mentions),
        wrong_merges,
        tuple(tuple(probe.text[s:e] for s, e in cluster) for cluster in clusters),
    )


@dataclass(frozen=True)
class ProbeSummary:
    """A model's answers to a set of probes."""

    probes: int
    right: int
    linked: int
    wrong_merges: int
    non_mentions: int

    @property
    def right_share(self) -> float:
        return self.right / self.probes if self.probes else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "probes": self.probes,
            "right": self.right,
            "right_percent": round(100 * self.right_share, 2),
            "linked": self.linked,
            "wrong_merges": self.wrong_merges,
            "non_mentions": self.non_mentions,
        }


def summarize_probes(judgements: Sequence[ProbeJudgement]) -> ProbeSummary:
    """Counts over a set of judged probes."""
    return ProbeSummary(
        probes=len(judgements),
        right=sum(j.right for j in judgements),
        linked=sum(j.linked for j in judgements),
        wrong_merges=sum(j.wrong_merges for j in judgements),
        non_mentions=sum(len(j.non_mentions) for j in judgements),
    )


class _Prediction(Protocol):
    char_clusters: Sequence[Sequence[Sequence[int]]]


class _Predicts(Protocol):
    def predict(self, text: str) -> _Prediction: ...


def judge_predictions(model: _Predicts, probes: Sequence[Probe]) -> list[ProbeJudgement]:
    """Each probe's text predicted alone with the model's defaults (``CorefModel.predict``), and judged."""
    return [judge_probe(probe, model.predict(probe.text).char_clusters) for probe in probes]


def ask_probes(model: _Predicts, paths: Sequence[str | Path]) -> dict[str, dict[str, Any]]:
    """A model's counts on each probe file (``ProbeSummary.to_dict``), keyed by the file's name without its suffix.

    Each text is predicted alone (:func:`judge_predictions`), as ``benchmarks/prediction/pronoun_probes.py`` does:
    the same figures. Every file is read and checked before the
    first prediction; two files of one name are a :class:`ProbeError`.
    """
    files: dict[str, list[Probe]] = {}
    for path in paths:
        name = Path(path).name.removesuffix(".jsonl")
        if name in files:
            raise ProbeError(f"{shown_path(path)}: another probe file is also named {name!r}; rename one")
        files[name] = read_probes(path)
    counts = {}
    for name, probes in files.items():
        summary = summarize_probes(judge_predictions(model, probes))
        logger.info(
            "%s: %d of %d right, %d pairs linked, %d wrong merges, %d non-mentions",
            name,
            summary.right,
            summary.probes,
            summary.linked,
            summary.wrong_merges,
            summary.non_mentions,
        )
        counts[name] = summary.to_dict()
    return counts
