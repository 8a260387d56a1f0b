"""SpanBERT's pretraining objective: span masking (masking) and its two prediction heads (heads)."""
