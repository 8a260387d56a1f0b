"""Nodes of the ``segment`` pipeline: word-level documents -> Joshi-format jsonlines."""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from coref_pipeline.conll import normalize_word, paused_gc
from coref_pipeline.datasets import partition_name
from coref_pipeline.encoders import resolve_encoder
from coref_pipeline.segmentation import SpecialTokens, load_tokenizer, segment_document, tokenize_documents

logger = logging.getLogger(__name__)


def segment_frame(
    frame: pd.DataFrame, tokenizer: Any, max_segment_lens: list[int], include_tokens: bool, description: str = "segment"
) -> dict[int, list[dict[str, Any]]]:
    """Segment word-level documents at every length: ``{max_segment_len: [jsonlines document]}``."""
    with paused_gc():
        return _segment_frame(frame, tokenizer, max_segment_lens, include_tokens, description)


def _segment_frame(
    frame: pd.DataFrame, tokenizer: Any, max_segment_lens: list[int], include_tokens: bool, description: str
) -> dict[int, list[dict[str, Any]]]:
    words = [[normalize_word(word) for word in doc_words] for doc_words in frame["words"]]
    tokenized = tokenize_documents(words, tokenizer)
    special = SpecialTokens.from_tokenizer(tokenizer)
    outputs = {}
    for max_segment_len in max_segment_lens:
        documents = []
        rows = zip(frame.itertuples(index=False), tokenized, words, strict=True)
        for row, tokens, doc_words in tqdm(rows, total=len(frame), desc=f"{description} {max_segment_len}"):
            documents.append(
                segment_document(
                    row.doc_key,
                    tokens,
                    row.sentence_ids,
                    row.speakers,
                    row.pos,
                    row.clusters,
                    max_segment_len,
                    special,
                    words=doc_words if include_tokens else None,
                )
            )
        outputs[max_segment_len] = documents
    return outputs


def segment_documents(
    train: pd.DataFrame, dev: pd.DataFrame, test: pd.DataFrame, params: dict[str, Any]
) -> dict[str, list[dict[str, Any]]]:
    """Segment every split at every ``max_segment_len``; keys are ``"{split}.{language}.{length}"``."""
    tokenizer = load_tokenizer(resolve_encoder(params["tokenizer"]))
    outputs: dict[str, list[dict[str, Any]]] = {}
    for split, frame in (("train", train), ("dev", dev), ("test", test)):
        by_length = segment_frame(
            frame, tokenizer, list(params["max_segment_lens"]), params["include_tokens"], f"segment {split}"
        )
        for max_segment_len, documents in by_length.items():
            outputs[partition_name(split, params["language"], max_segment_len)] = documents
    return outputs
