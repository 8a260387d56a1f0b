"""SpanBERT's pretraining objective: span masking (`masking`), its two prediction heads (`heads`), examples and
batches (`data`), the encoder with both heads (`model`), and the run that trains it through the training loop
(`run`)."""
