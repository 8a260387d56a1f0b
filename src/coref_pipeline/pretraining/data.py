"""The text SpanBERT's objective trains on: segments of subtokens with their words, batched and masked.

A segmented document (the ``segment`` stage's jsonlines: ``sentences`` holds each segment's subtokens with
``[CLS]`` and ``[SEP]``, ``subtoken_map`` each subtoken's word) gives one example per segment: one contiguous
stretch of text up to the segment length, no second sentence (SpanBERT's single-sequence training). The
held-out share is drawn by document, so no held-out text is in a training segment. A batch is masked when its
step comes (``MaskBatch``), from the run's resumable generator: each epoch sees new masks, and a resumed run
draws the masks the killed one would have.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from coref_pipeline.pretraining.heads import SpanTargets
from coref_pipeline.pretraining.masking import IGNORE_INDEX, MaskingScheme


@dataclass(frozen=True)
class Segment:
    """One example: subtoken ids and, for each subtoken, its word (None for a special token)."""

    input_ids: tuple[int, ...]
    word_ids: tuple[int | None, ...]


def document_segments(document: Mapping[str, Any], tokenizer: Any) -> list[Segment]:
    """The segments of one segmented document, as ids and words (its special tokens never masked)."""
    special = set(tokenizer.all_special_tokens)
    subtoken_map = document["subtoken_map"]
    segments, offset = [], 0
    for subtokens in document["sentences"]:
        ids = tokenizer.convert_tokens_to_ids(subtokens)
        words = [None if token in special else subtoken_map[offset + i] for i, token in enumerate(subtokens)]
        segments.append(Segment(tuple(ids), tuple(words)))
        offset += len(subtokens)
    return segments


def held_out_documents(doc_keys: Sequence[str], share: float, seed: int) -> set[str]:
    """The documents whose segments are held out for the pretraining loss: ``share`` of them (at least one
    where there are two or more, none where ``share`` is 0), drawn by ``seed``."""
    if share <= 0 or len(doc_keys) < 2:
        return set()
    keys = sorted(doc_keys)
    random.Random(seed).shuffle(keys)
    return set(keys[: min(len(keys) - 1, max(1, round(share * len(keys))))])


def batches(segments: Sequence[Segment], batch_segments: int, seed: int) -> list[list[Segment]]:
    """The segments in batches of ``batch_segments`` (the last may be smaller), shuffled once by ``seed`` so that
    a batch mixes documents; the training loop orders the batches anew every epoch."""
    order = list(range(len(segments)))
    random.Random(seed).shuffle(order)
    return [
        [segments[i] for i in order[first : first + batch_segments]] for first in range(0, len(order), batch_segments)
    ]


@dataclass
class MaskedBatch:
    """A masked batch as tensors: ``input_ids``, ``attention_mask`` and ``labels`` ``[B, L]`` (labels
    ``IGNORE_INDEX`` where nothing is predicted), and the span boundary targets over the flattened ``B * L``
    positions."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor
    targets: SpanTargets

    def to(self, device: torch.device) -> MaskedBatch:
        targets = SpanTargets(
            *(t.to(device) for t in (self.targets.position, self.targets.left, self.targets.right, self.targets.offset))
        )
        return MaskedBatch(self.input_ids.to(device), self.attention_mask.to(device), self.labels.to(device), targets)


class MaskBatch:
    """A batch of segments masked by ``scheme`` with draws from a generator (picklable, for spawned ranks)."""

    def __init__(self, scheme: MaskingScheme, tokenizer: Any, max_span_subtokens: int) -> None:
        self.scheme = scheme
        self.mask_id = tokenizer.mask_token_id
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        special = set(tokenizer.all_special_ids)
        self.random_ids = [i for i in range(len(tokenizer)) if i not in special]
        self.max_span_subtokens = max_span_subtokens

    def __call__(self, batch: Sequence[Segment], generator: torch.Generator) -> MaskedBatch:
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device="cpu"))
        return self.masked(batch, random.Random(seed))

    def masked(self, batch: Sequence[Segment], rng: random.Random) -> MaskedBatch:
        width = max(len(segment.input_ids) for segment in batch)
        input_ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        labels = torch.full((len(batch), width), IGNORE_INDEX, dtype=torch.long)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        spans = []
        for row, segment in enumerate(batch):
            masked = self.scheme.mask(segment.input_ids, segment.word_ids, self.mask_id, self.random_ids, rng)
            length = len(masked.input_ids)
            input_ids[row, :length] = torch.tensor(masked.input_ids)
            labels[row, :length] = torch.tensor(masked.labels)
            attention_mask[row, :length] = 1
            shift = row * width  # positions in the flattened batch
            spans.extend(type(span)(span.start + shift, span.end + shift, span.replacement) for span in masked.spans)
        return MaskedBatch(input_ids, attention_mask, labels, SpanTargets.of(spans, self.max_span_subtokens))
