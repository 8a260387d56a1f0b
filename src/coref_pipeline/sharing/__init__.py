"""A model shared with others: its card in the Hugging Face Hub's format, and the push of a model directory to
the Hub."""
