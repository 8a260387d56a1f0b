"""What a trained model is measured on beyond its corpus's test: named test sets and models, and Xia et al.'s segment-length study."""
