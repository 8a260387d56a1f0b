"""Corpora on disk and the documents they become: CoNLL-2012 files, word-level documents, subword segments
(Joshi et al.'s jsonlines) and plain text."""
