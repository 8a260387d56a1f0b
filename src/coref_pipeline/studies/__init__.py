"""What a trained model is measured on beyond its corpus's test: named test sets and models, Xia et al.'s segment-length
study, and pronoun probes (short texts: the obvious pair, no stranger in its cluster)."""
