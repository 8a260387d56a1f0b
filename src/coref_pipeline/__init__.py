"""coref-pipeline: reproducible data-and-model pipelines for neural coreference resolution."""

__version__ = "0.1.0"
