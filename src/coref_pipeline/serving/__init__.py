"""A trained model answering text: `CorefModel` and its results in Python, over HTTP, in a spaCy pipeline."""
