"""coref-pipeline: reproducible data-and-model pipelines for neural coreference resolution.

``from coref_pipeline import CorefModel``; ``CorefModel.load(DIR).predict(text)``.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["CorefModel", "CorefResult", "DocumentTooLongError"]


def __getattr__(name: str) -> Any:
    # Imported on first use: Kedro imports this package for its settings and should not load torch.
    if name in __all__:
        from coref_pipeline import predict

        return getattr(predict, name)
    raise AttributeError(f"module 'coref_pipeline' has no attribute {name!r}")
