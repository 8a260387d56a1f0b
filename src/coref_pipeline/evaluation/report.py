"""The ``evaluate`` pipeline's work on one model and split: response file, metrics, breakdowns, chart."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pandas as pd

from coref_pipeline.config_base import Config, ConfigError
from coref_pipeline.evaluation.breakdown import breakdown_table, document_info, document_table, f1_by_length_figure
from coref_pipeline.evaluation.metrics import METRIC_NAMES
from coref_pipeline.evaluation.predictions import (
    gold_key,
    headline_metrics,
    score_predictions,
    summary_metrics,
    word_clusters,
)
from coref_pipeline.evaluation.scoring import check_metrics
from coref_pipeline.formats.conll import (
    DEFAULT_GENRE,
    GENRES,
    ConllFile,
    format_conll_response,
)
from coref_pipeline.formats.segmentation import SegmentLength

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvaluateSettings(Config):
    """How predictions are scored (the ``evaluate`` parameters; training scores dev with the same)."""

    what: ClassVar[str] = "evaluate"

    metrics: tuple[str, ...] = METRIC_NAMES
    # Drop one-mention clusters from key and response (OntoNotes has no gold singletons;
    # true for corpora such as LitBank that annotate them, as papers report on them).
    remove_singletons: bool = False
    genres: tuple[str, ...] = GENRES
    default_genre: str = DEFAULT_GENRE
    # Dev is also scored with the model reading segments of these lengths (SegmentLength labels).
    segment_lengths: tuple[int | str, ...] = ()
    # More test sets, by name (evaluation.test_sets: read_test_sets reads and checks them).
    test_sets: dict[str, Any] = field(default_factory=dict)
    # More models scored on the corpus's test and every set, by name: model directories (an imported release).
    models: dict[str, str] = field(default_factory=dict)
    # Pronoun probe files (studies.probes: short English texts, a pronoun, its antecedent and a stranger) that each
    # model is asked: its counts by file (probes_<model>.json and the model card).
    probes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        try:
            check_metrics(self.metrics)
        except ValueError as error:
            raise ConfigError(f"evaluate key 'metrics': {error}") from None
        try:
            object.__setattr__(
                self, "segment_lengths", tuple(SegmentLength.parse(length).label for length in self.segment_lengths)
            )
        except ValueError as error:
            raise ConfigError(f"evaluate key 'segment_lengths': {error}") from None


@dataclass
class EvaluationReport:
    """What ``evaluate_predictions`` produces for one model on one split."""

    response: str  # the predictions as a CoNLL-2012 file in the gold file's layout
    metrics: dict[str, float]  # the headline figures (CoNLL F1, MUC, B3, CEAF-e, LEA F1): the DVC metrics file
    scores: dict[str, Any]  # every metric's recall, precision and F1 in percent, and the raw counts
    documents: pd.DataFrame  # one row per document
    breakdown: pd.DataFrame  # CoNLL F1 by length, number of speakers and genre (Xia et al.)
    f1_by_length: Any  # a matplotlib figure of the breakdown by length


def evaluate_predictions(
    predictions: Sequence[Mapping[str, Any]], gold: ConllFile, settings: EvaluateSettings = EvaluateSettings()
) -> EvaluationReport:
    """Score jsonlines predictions against the gold CoNLL file itself, as the reference scorer would."""
    response_clusters = {document["doc_key"]: word_clusters(document) for document in predictions}
    response_text = format_conll_response(gold.text, response_clusters, gold.path)
    scores = score_predictions(predictions, settings.remove_singletons, settings.metrics, gold_key(gold))
    infos = {d["doc_key"]: document_info(d, settings.default_genre, settings.genres) for d in predictions}
    details: dict[str, Any] = {
        "documents": len(predictions),
        # how the figures were scored: LitBank's are with its one-mention entities removed, as papers report them
        "singletons": "removed from key and response" if settings.remove_singletons else "kept",
        **summary_metrics(scores),
        "counts": scores.to_dict(),
    }
    breakdown = breakdown_table(scores, infos)
    metrics = headline_metrics(scores)
    logger.info("CoNLL F1 %.2f on %d documents", metrics.get("conll_f1", float("nan")), len(predictions))
    return EvaluationReport(
        response_text, metrics, details, document_table(scores, infos), breakdown, f1_by_length_figure(breakdown)
    )
