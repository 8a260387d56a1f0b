"""coref-pipeline: reproducible data-and-model pipelines for neural coreference resolution.

The library's entry points, which the Kedro nodes, the ``coref-pipeline`` command and
the benchmarks all call::

    from coref_pipeline import preprocess_corpus, segment_corpus      # CoNLL-2012 -> jsonlines
    from coref_pipeline import train_baseline, train_incremental      # jsonlines -> model directory
    from coref_pipeline import pretrain_encoder                       # jsonlines -> encoder directory (SpanBERT)
    from coref_pipeline import CorefModel                             # CorefModel.load(DIR).predict(text)
    from coref_pipeline import evaluate_predictions                   # official CoNLL-2012 metrics
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.2.0"

# Imported on first use: Kedro imports this package for its settings and should not load torch.
_ENTRY_POINTS = {
    "CorefModel": "coref_pipeline.serving.coref_model",
    "DocumentTooLongError": "coref_pipeline.serving.coref_model",
    "CorefResult": "coref_pipeline.serving.results",
    "preprocess_corpus": "coref_pipeline.formats.corpus",
    "segment_corpus": "coref_pipeline.formats.corpus",
    "SegmentedCorpus": "coref_pipeline.formats.corpus",
    "train_baseline": "coref_pipeline.training",
    "train_incremental": "coref_pipeline.training",
    "pretrain_encoder": "coref_pipeline.pretraining.run",
    "evaluate_predictions": "coref_pipeline.evaluation.report",
}
__all__ = sorted(_ENTRY_POINTS)


def __getattr__(name: str) -> Any:
    if name in _ENTRY_POINTS:
        return getattr(import_module(_ENTRY_POINTS[name]), name)
    raise AttributeError(f"module 'coref_pipeline' has no attribute {name!r}")
