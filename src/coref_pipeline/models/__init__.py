"""The coreference models in torch: their typed configurations, the encoder, span and pair scorers, the baseline and
the incremental model, documents as tensors, and model directories on disk."""
