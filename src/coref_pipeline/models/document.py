"""Jsonlines documents as tensors, and the training-time crop to a window of segments."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch

from coref_pipeline.formats.conll import genre_of
from coref_pipeline.formats.segmentation import SPEAKER_PLACEHOLDER, check_field_lengths
from coref_pipeline.models.spans import candidate_spans

# Speaker ids, as the original numbers them: unknown, the [CLS]/[SEP] placeholder, then each new speaker.
SPEAKER_ID_UNKNOWN, SPEAKER_ID_PLACEHOLDER, SPEAKER_ID_OVERFLOW = 0, 1, 3


@dataclass
class DocumentTensors:
    """One document (or a crop of it) ready for the model. ``n`` = subtokens incl. [CLS]/[SEP]."""

    doc_key: str
    input_ids: torch.Tensor  # [num_segments, longest segment] long, 0-padded
    attention_mask: torch.Tensor  # [num_segments, longest segment] long
    speaker_ids: torch.Tensor  # [n] long
    sentence_map: torch.Tensor  # [n] long
    segment_of_token: torch.Tensor  # [n] long
    special: torch.Tensor  # [n] bool: [CLS]/[SEP], which no candidate span contains unless special_token_spans
    word_start: torch.Tensor  # [n] bool: first subtoken of a word (never [CLS]/[SEP])
    word_end: torch.Tensor  # [n] bool: last subtoken of a word (never [CLS]/[SEP])
    genre: int
    gold_starts: torch.Tensor  # [num_gold] long, sorted by (start, end)
    gold_ends: torch.Tensor  # [num_gold] long
    gold_cluster_ids: torch.Tensor  # [num_gold] long, 1-based
    token_offset: int = 0  # position of this crop's first subtoken in the full document
    # Each segment's subtokens, on the host (known without reading attention_mask back); () when not given.
    segment_lengths: tuple[int, ...] = ()

    def to(self, device: torch.device | str) -> DocumentTensors:
        """The same document with every tensor on ``device``."""
        moved = {
            item.name: getattr(self, item.name).to(device)
            for item in fields(self)
            if isinstance(getattr(self, item.name), torch.Tensor)
        }
        return replace(self, **moved)

    def candidate_spans(
        self, max_span_width: int, word_boundaries: bool, window: slice = slice(None), special_tokens: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Candidate spans of the tokens in ``window`` (indices local to it): never over [CLS]/[SEP], or, with
        ``special_tokens`` (the original's rule), over them wherever the sentence map allows."""
        return candidate_spans(
            self.sentence_map[window],
            max_span_width,
            None if special_tokens else self.special[window],
            self.word_start[window] if word_boundaries else None,
            self.word_end[window] if word_boundaries else None,
        )

    def lengths(self) -> tuple[int, ...]:
        """Each segment's subtokens: ``segment_lengths``, or ``attention_mask`` read back when it was not given."""
        if not self.segment_lengths:
            return tuple(self.attention_mask.sum(dim=1).tolist())
        return self.segment_lengths

    @property
    def num_tokens(self) -> int:
        return int(self.sentence_map.shape[0])

    @property
    def num_segments(self) -> int:
        return int(self.input_ids.shape[0])


def speaker_dict(speakers: Sequence[str], max_num_speakers: int) -> dict[str, int]:
    """The original's speaker ids: UNK 0, [SPL] 1, then each new speaker while fewer than the cap."""
    ids = {"UNK": SPEAKER_ID_UNKNOWN, SPEAKER_PLACEHOLDER: SPEAKER_ID_PLACEHOLDER}
    for speaker in speakers:
        if speaker not in ids and len(ids) < max_num_speakers:
            ids[speaker] = len(ids)
    return ids


def tensorize(
    document: Mapping[str, Any],
    tokenizer: Any,
    max_segment_len: int,
    genres: Sequence[str],
    default_genre: str,
    max_num_speakers: int,
    device: torch.device | str = "cpu",
) -> DocumentTensors:
    """A Joshi-format jsonlines document as tensors on ``device`` (speakers beyond the cap get id 3, as the original).

    The tensors are built on the CPU, whatever the default device, then moved.
    """
    cpu = torch.device("cpu")
    check_field_lengths(document, f"document {document.get('doc_key')!r}")
    segments = document["sentences"]
    flat_tokens = [token for segment in segments for token in segment]
    num_tokens = len(flat_tokens)
    longest = max(len(segment) for segment in segments)
    if longest > max_segment_len:
        raise ValueError(
            f"document {document['doc_key']!r} has a segment of {longest} subtokens; the model takes "
            f"{max_segment_len} (segment the corpus with this max_segment_len)"
        )
    # Padded to the longest segment, not to max_segment_len: short segments (a sentence each) cost
    # what they hold; the mask makes the padding's width irrelevant to the outputs.
    input_ids = torch.zeros(len(segments), longest, dtype=torch.long, device=cpu)
    attention_mask = torch.zeros(len(segments), longest, dtype=torch.long, device=cpu)
    for index, segment in enumerate(segments):
        token_ids = torch.tensor(tokenizer.convert_tokens_to_ids(segment), dtype=torch.long, device=cpu)
        input_ids[index, : len(segment)] = token_ids
        attention_mask[index, : len(segment)] = 1
    segment_of_token = torch.repeat_interleave(
        torch.arange(len(segments), device=cpu), torch.tensor([len(segment) for segment in segments], device=cpu)
    )

    speakers = [speaker for segment in document["speakers"] for speaker in segment]
    ids = speaker_dict(speakers, max_num_speakers)
    speaker_ids = torch.tensor(
        [ids.get(speaker, SPEAKER_ID_OVERFLOW) for speaker in speakers], dtype=torch.long, device=cpu
    )

    subtoken_map = np.asarray(document["subtoken_map"])  # [n]
    special = np.zeros(num_tokens, dtype=bool)
    offset = 0
    for segment in segments:
        special[offset] = special[offset + len(segment) - 1] = True
        offset += len(segment)
    word_start = ~special & np.r_[True, subtoken_map[1:] != subtoken_map[:-1]]
    word_start |= ~special & np.r_[True, special[:-1]]
    word_end = ~special & np.r_[subtoken_map[1:] != subtoken_map[:-1], True]
    word_end |= ~special & np.r_[special[1:], True]

    mentions = sorted({(int(s), int(e)) for cluster in document["clusters"] for s, e in cluster})
    cluster_of = {}
    for cluster_id, cluster in enumerate(document["clusters"], start=1):
        for start, end in cluster:
            cluster_of[(int(start), int(end))] = cluster_id
    doc_key = document["doc_key"]
    genre = genre_of(doc_key, genres, default_genre)
    return DocumentTensors(
        doc_key=doc_key,
        input_ids=input_ids,
        attention_mask=attention_mask,
        speaker_ids=speaker_ids,
        sentence_map=torch.tensor(document["sentence_map"], dtype=torch.long, device=cpu),
        segment_of_token=segment_of_token,
        special=torch.from_numpy(special),
        word_start=torch.from_numpy(word_start),
        word_end=torch.from_numpy(word_end),
        genre=list(genres).index(genre),
        gold_starts=torch.tensor([s for s, _ in mentions], dtype=torch.long, device=cpu),
        gold_ends=torch.tensor([e for _, e in mentions], dtype=torch.long, device=cpu),
        gold_cluster_ids=torch.tensor([cluster_of[m] for m in mentions], dtype=torch.long, device=cpu),
        segment_lengths=tuple(len(segment) for segment in segments),
    ).to(device)


def crop(document: DocumentTensors, max_segments: int, first_segment: int) -> DocumentTensors:
    """Segments ``first_segment .. first_segment + max_segments - 1``; gold mentions filtered and shifted."""
    if document.num_segments <= max_segments:
        return document
    last_segment = first_segment + max_segments
    lengths = document.lengths()
    token_start = sum(lengths[:first_segment])
    token_stop = token_start + sum(lengths[first_segment:last_segment])
    inside = (document.gold_starts >= token_start) & (document.gold_ends < token_stop)  # [num_gold]
    inside = inside.nonzero().squeeze(1)  # one read for the three gold tensors
    window = slice(token_start, token_stop)
    return replace(
        document,
        input_ids=document.input_ids[first_segment:last_segment],
        attention_mask=document.attention_mask[first_segment:last_segment],
        speaker_ids=document.speaker_ids[window],
        sentence_map=document.sentence_map[window],
        segment_of_token=document.segment_of_token[window] - first_segment,
        special=document.special[window],
        word_start=document.word_start[window],
        word_end=document.word_end[window],
        gold_starts=document.gold_starts.index_select(0, inside) - token_start,
        gold_ends=document.gold_ends.index_select(0, inside) - token_start,
        gold_cluster_ids=document.gold_cluster_ids.index_select(0, inside),
        token_offset=document.token_offset + token_start,
        segment_lengths=lengths[first_segment:last_segment],
    )


def random_crop(document: DocumentTensors, max_segments: int, generator: torch.Generator) -> DocumentTensors:
    """A random window of ``max_segments`` segments, drawn from ``generator`` (re-drawn every call)."""
    if document.num_segments <= max_segments:
        return document
    first = int(torch.randint(0, document.num_segments - max_segments + 1, (1,), generator=generator, device="cpu"))
    return crop(document, max_segments, first)
