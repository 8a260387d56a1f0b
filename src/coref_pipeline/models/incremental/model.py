"""The incremental model's module: its weights, how it reads a document segment by segment, and its start from
the baseline."""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from coref_pipeline.models.config import IncrementalConfig, require_resolved
from coref_pipeline.models.document import DocumentTensors
from coref_pipeline.models.encoder import SegmentEncoder
from coref_pipeline.models.incremental.decisions import decide_segment
from coref_pipeline.models.incremental.features import PairFeatures
from coref_pipeline.models.incremental.gold import GoldAntecedents
from coref_pipeline.models.incremental.loss import SegmentLoss, window_loss
from coref_pipeline.models.incremental.memory import EntityMemory, Span
from coref_pipeline.models.incremental.scoring import SegmentScores, host_tensor
from coref_pipeline.models.layers import FFNN
from coref_pipeline.models.scorers import FirstLayerParts, PairScorer, SpanScorer
from coref_pipeline.models.spans import gold_mention_loss, prune_spans

logger = logging.getLogger(__name__)

# Most subtokens times max_span_width times ffnn_size in one window of segments whose candidates are scored
# together: 2**25 floats, 128 MB in fp32. It bounds the candidate pass's largest tensors: with a graph its
# [candidates, ffnn] ones (a subtoken starts fewer than max_span_width candidates); without one (prediction) the pass
# runs in slices (``SpanScorer.score_candidates``) and its largest are the head's attention table and the per-token
# parts, [about log2(max_span_width) + 2 times the subtokens, ffnn] at most, under the same bound.
SPAN_WINDOW_ELEMENTS = 2**25
# A document's encoder outputs, given to the model: a function of a segment's index (``[segment_len, H]``: a
# cache), or the whole document's ``[num_subtokens, H]``, already encoded (several documents in one pass).
EncodedSegments = Callable[[int], torch.Tensor] | torch.Tensor


@dataclass
class IncrementalOutput:
    """What the model did with one document."""

    clusters: list[list[Span]]  # entities with two or more mentions (subtoken spans)
    loss: float | None  # training objective summed over the document (None at inference without gold)
    memory: EntityMemory
    kept_spans: list[Span]


class SpanProjections(NamedTuple):
    """What the pair scorer reads of a segment's kept spans before any pair: their rows of its first layer's target
    and candidate parts and, with the coarse term, their coarse projection
    (``IncrementalCorefModel.span_projections``)."""

    targets: torch.Tensor  # [k, ffnn]: the target part with the layer's bias
    candidates: torch.Tensor  # [k, ffnn]: the candidate part
    sources: torch.Tensor | None  # [k, D]: src_projection (in bf16 at bf16 inference); None without the coarse term

    def rows(self, first: int, end: int) -> SpanProjections:
        """The projections of the spans ``first`` to ``end`` (of several segments' computed together)."""
        sources = None if self.sources is None else self.sources[first:end]
        return SpanProjections(self.targets[first:end], self.candidates[first:end], sources)


class SegmentSpans(NamedTuple):
    """``IncrementalCorefModel.segment_spans``: one segment's kept spans."""

    starts: torch.Tensor  # [k]: local to the segment
    ends: torch.Tensor  # [k]
    embeddings: torch.Tensor  # [k, D]
    mention_scores: torch.Tensor  # [k]
    mention_loss: torch.Tensor | None  # with train and mention_loss_coef: the weighted mention loss
    spans: list[Span]  # the same spans in the document's offsets, on the host (known without a read)
    ends_window: bool = True  # the last segment of the window of segments whose spans were scored together
    projections: SpanProjections | None = None  # computed with other documents' (forward_group); else by resolve_spans


class IncrementalCorefModel(nn.Module):
    """Encoder, the baseline's span and pair scorers, and the entity update network."""

    def __init__(self, config: IncrementalConfig, encoder: SegmentEncoder) -> None:
        super().__init__()
        require_resolved(config)
        self.config = config
        self.encoder = encoder
        self.span_scorer = SpanScorer(config, encoder.hidden_size)
        self.span_dim = self.span_scorer.span_dim
        # With a frozen encoder, h_start and h_end (g's first columns) take no gradient, unless a learned update
        # mixes them into the entity representations it scores.
        mixed = config.entity_representation and config.update == "learned"
        fixed = 0 if config.finetune_encoder or mixed else 2 * encoder.hidden_size
        self.pair_scorer = PairScorer(config, self.span_dim, fixed_columns=fixed)
        # alpha = sigmoid(FFNN([e; m])): one hidden layer, ReLU (new, not in the baseline).
        self.alpha = FFNN(2 * self.span_dim, config.alpha_hidden_size, 1, 1, config.dropout_rate)
        if self.uses_coarse:  # the baseline's coarse bilinear W (copied from it)
            self.src_projection = nn.Linear(self.span_dim, self.span_dim)
        if not config.finetune_encoder:
            self.encoder.requires_grad_(False)

    @property
    def uses_coarse(self) -> bool:
        """Whether the score or the entity pre-filter needs the baseline's coarse bilinear term."""
        return self.config.score == "calibrated" or self.config.max_top_entities is not None

    def task_modules(self) -> list[nn.Module]:
        """Every module but the encoder (the task parameters)."""
        return [module for name, module in self.named_children() if name != "encoder"]

    def train(self, mode: bool = True) -> IncrementalCorefModel:
        """As ``nn.Module.train``, but a frozen encoder stays in evaluation mode (no dropout)."""
        super().train(mode)
        if not self.config.finetune_encoder:
            self.encoder.eval()
        return self

    # ---------------------------------------------------------------- pieces
    def encode_segments(self, document: DocumentTensors, first: int, count: int) -> list[torch.Tensor]:
        """Segments ``first`` to ``first + count - 1`` in one pass of the encoder (the model's one call of it):
        each one's subtoken representations ``[segment_len, H]``."""
        lengths = document.lengths()[first : first + count]
        window = slice(first, first + count)
        ids = document.input_ids[window, : max(lengths)]
        mask = document.attention_mask[window, : max(lengths)]
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.trains_encoder):
            hidden = self.encoder(ids, mask, lengths)  # [their subtokens, H]
        return list(hidden.split(lengths)) if count > 1 else [hidden]

    def encode_segment(self, document: DocumentTensors, index: int) -> torch.Tensor:
        """One segment's subtoken representations: ``[segment_len, H]``."""
        return self.encode_segments(document, index, 1)[0]

    @property
    def trains_encoder(self) -> bool:
        """Whether the encoder is in the segments' graph: fine-tuned, in training."""
        return self.config.finetune_encoder and self.training

    @property
    def encoder_window(self) -> int:
        """Segments encoded in one pass when reading a document (windows aligned on the document's first segment,
        so that a segment is always encoded with the same others: the same numbers at every visit): the encoder's
        batch; one at a time when the encoder trains (each segment's graph is backpropagated before the next is
        read) or in training on crops (crops of one document share segments, not windows)."""
        if self.trains_encoder or (self.training and self.config.crop_training_documents):
            return 1
        return self.encoder.segment_batch_size

    @property
    def span_window_subtokens(self) -> int:
        """The most subtokens whose candidates are scored together (``SPAN_WINDOW_ELEMENTS``), at least one
        segment's."""
        return max(1, SPAN_WINDOW_ELEMENTS // (self.config.max_span_width * int(self.config.ffnn_size)))

    def encoder_windows(self, document: DocumentTensors, index: int) -> tuple[int, int]:
        """The window of segments ``index`` is encoded with: its first segment and its number of segments."""
        size = self.encoder_window
        first = index - index % size
        return first, min(size, document.num_segments - first)

    def segment_outputs(
        self, document: DocumentTensors, encoded: EncodedSegments | None = None
    ) -> Callable[[int], torch.Tensor]:
        """Segment ``i``'s encoder output ``[segment_len, H]`` as a function of ``i`` (called in order): from
        ``encoded`` (a function of the index, or the document's ``[num_subtokens, H]``), or encoded here a window
        of ``encoder_window`` segments at a time (only the current window's outputs are kept)."""
        if callable(encoded):
            return encoded
        lengths = document.lengths()
        if encoded is not None:
            starts = [sum(lengths[:index]) for index in range(len(lengths))]
            return lambda index: encoded[starts[index] : starts[index] + lengths[index]]
        window: dict[int, torch.Tensor] = {}

        def output(index: int) -> torch.Tensor:
            if index not in window:
                window.clear()
                first, count = self.encoder_windows(document, index)
                outputs = self.encode_segments(document, first, count)  # each [segment_len, H]
                window.update(zip(range(first, first + count), outputs, strict=True))
            return window[index]

        return output

    def candidate_spans(self, document: DocumentTensors, window: slice) -> tuple[torch.Tensor, torch.Tensor]:
        """The candidate spans of the document's subtokens in ``window`` by the model's rules, in the window's
        offsets: starts and ends ``[num_candidates]``."""
        config = self.config
        return document.candidate_spans(
            config.max_span_width, config.word_boundary_spans, window, config.special_token_spans
        )

    def segment_spans(
        self, document: DocumentTensors, hidden: torch.Tensor, offset: int, train: bool = False
    ) -> SegmentSpans:
        """Kept spans of one segment (``hidden`` ``[segment_len, H]`` its encoder output, ``offset`` its first
        subtoken's position), with their embeddings and mention scores, and with ``train`` and
        ``mention_loss_coef`` the weighted mention loss of its candidates or of its kept spans
        (``mention_loss_spans``)."""
        config = self.config
        length = hidden.shape[0]
        window = slice(offset, offset + length)
        starts, ends = self.candidate_spans(document, window)
        if starts.numel() == 0:
            empty = torch.zeros(0, dtype=torch.long, device=hidden.device)
            return SegmentSpans(empty, empty, hidden.new_zeros(0, self.span_dim), hidden.new_zeros(0), None, [])
        k = max(1, min(int(length * config.top_span_ratio), starts.shape[0]))
        with_loss = train and bool(config.mention_loss_coef)
        over_candidates = config.mention_loss_spans == "candidates"
        kept_spans: list[Span] = []
        candidate_scores, kept, scores, embeddings = self.span_scorer.top_spans(
            hidden,
            starts,
            ends,
            k,
            candidate_gradients=with_loss and over_candidates,
            kept_spans=kept_spans,
            crossing=config.crossing_spans,
        )  # [candidates], [k], [k], [k, D]
        mention_loss = None
        if with_loss:
            if over_candidates:
                loss_starts, loss_ends, loss_scores = starts, ends, candidate_scores
            else:
                loss_starts, loss_ends, loss_scores = starts[kept], ends[kept], scores
            mention_loss = config.mention_loss_coef * gold_mention_loss(
                loss_starts + offset, loss_ends + offset, loss_scores, document.gold_starts, document.gold_ends
            )
        spans = [(start + offset, end + offset) for start, end in kept_spans]
        return SegmentSpans(starts[kept], ends[kept], embeddings, scores, mention_loss, spans)

    def span_windows(
        self, document: DocumentTensors, hidden_of: Callable[[int], torch.Tensor], train: bool = False
    ) -> Callable[[int, int], SegmentSpans]:
        """``segment_spans`` as a function of a segment's index and offset (called in order), computed for a window
        of segments at a time: every candidate's mention score in one pass without a graph
        (``SpanScorer.candidate_scores``), each segment's spans pruned on its own, then every kept span of the
        window scored again in one pass, with its graph in training (``kept_span_scores``). A window is at most
        the encoder's batch of segments (one when the encoder trains) and ``SPAN_WINDOW_ELEMENTS`` elements of
        the candidate pass's largest tensors, so memory does not grow with the document; in training the caller
        backpropagates at each window's end (``SegmentSpans.ends_window``). The same kept spans, embeddings and
        scores as ``segment_spans``, to float rounding (other GEMM shapes). A mention loss over every candidate
        (``mention_loss_spans: candidates``) needs each segment's candidates in its graph: then ``segment_spans``
        itself, segment by segment."""
        config = self.config
        if train and config.mention_loss_coef and config.mention_loss_spans == "candidates":
            return lambda index, offset: self.segment_spans(document, hidden_of(index), offset, train)
        lengths = document.lengths()
        budget = self.span_window_subtokens
        # A window's graph is backpropagated at its end (``SegmentSpans.ends_window``): one segment when the encoder
        # trains (its graph holds the encoder's activations) or clip_every_segment, else the encoder's batch.
        # With clip_every_segment each segment's loss is its own window, as the clip follows each backward.
        one_segment = self.trains_encoder or (train and config.clip_every_segment)
        segments_cap = 1 if one_segment else self.encoder.segment_batch_size
        window: dict[int, tuple] = {}  # segment index -> its kept spans, scored with the window's

        def read_window(first: int, offset: int) -> None:
            count, tokens = 1, lengths[first]
            while first + count < len(lengths) and count < segments_cap and tokens + lengths[first + count] <= budget:
                tokens += lengths[first + count]
                count += 1
            outputs = [hidden_of(index) for index in range(first, first + count)]  # each [segment_len, H]
            hidden = torch.cat(outputs) if count > 1 else outputs[0]  # [tokens, H]
            starts, ends = self.candidate_spans(document, slice(offset, offset + tokens))  # in the window's offsets
            bounds = [0]  # each segment's first subtoken in the window, then the window's end
            for index in range(first, first + count):
                bounds.append(bounds[-1] + lengths[index])
            if config.special_token_spans and count > 1:  # the original's rule: a span may cross a segment's end
                within = torch.searchsorted(host_tensor(bounds[1:-1], starts.device), starts, right=True)
                within = within == torch.searchsorted(host_tensor(bounds[1:-1], ends.device), ends, right=True)
                inside = within.nonzero().squeeze(1)
                starts, ends = starts.index_select(0, inside), ends.index_select(0, inside)
            window.clear()
            for position, kept in enumerate(self.window_spans(hidden, starts, ends, bounds)):
                window[first + position] = (*kept, position == count - 1)

        def spans(index: int, offset: int) -> SegmentSpans:
            if index not in window:
                read_window(index, offset)
            starts, ends, embeddings, scores, kept_spans, last = window.pop(index)
            mention_loss = None
            if train and config.mention_loss_coef and kept_spans:  # over the kept spans (mention_loss_spans: top)
                mention_loss = config.mention_loss_coef * gold_mention_loss(
                    starts + offset, ends + offset, scores, document.gold_starts, document.gold_ends
                )
            found = [(start + offset, end + offset) for start, end in kept_spans]
            return SegmentSpans(starts, ends, embeddings, scores, mention_loss, found, last)

        return spans

    def window_spans(
        self, hidden: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor, bounds: Sequence[int]
    ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list[Span]]]:
        """Each segment's kept spans, its segments read together (``hidden`` ``[tokens, H]``: the segments'
        subtokens one after another; ``starts``, ``ends``: their candidates, sorted by start, in ``hidden``'s
        offsets; ``bounds``: each segment's first subtoken in ``hidden``, then its end): every candidate's mention
        score in one pass (``SpanScorer.candidate_scores``), each segment pruned on its own (``top_span_ratio`` of
        its length), then every kept span scored again in one pass (``kept_span_scores``). For each segment:
        its kept spans' starts and ends local to it ``[k]``, their embeddings ``[k, D]`` and mention scores
        ``[k]``, and the spans local to it on the host."""
        config, count = self.config, len(bounds) - 1
        scores = self.span_scorer.candidate_scores(hidden, starts, ends) if starts.numel() else None
        # Each segment's first candidate (the candidates are sorted by start): one read for the window.
        cuts = torch.searchsorted(starts, host_tensor(bounds, starts.device)).tolist()
        # Each segment's kept spans (pruned on its own, k of its length), then every kept span of the window
        # scored in one pass: [kept in the window], [kept in the window, D].
        kept_rows, kept_lists, sizes = [], [], []
        for position in range(count):
            rows = slice(cuts[position], cuts[position + 1])
            local = bounds[position]
            kept_spans: list[Span] = []
            if rows.stop > rows.start:
                length = bounds[position + 1] - local
                k = max(1, min(int(length * config.top_span_ratio), rows.stop - rows.start))
                kept = prune_spans(
                    scores.scores[rows],
                    starts[rows] - local,
                    ends[rows] - local,
                    k,
                    kept_spans,
                    config.crossing_spans,
                )  # [k], sorted by (start, end), rows of the segment's candidates
                kept_rows.append(kept + rows.start)
            kept_lists.append(kept_spans)
            sizes.append(len(kept_spans))
        if kept_rows:
            kept = torch.cat(kept_rows) if len(kept_rows) > 1 else kept_rows[0]  # [kept in the window]
            mention_scores, embeddings = self.span_scorer.kept_span_scores(hidden, starts, ends, kept, scores)
            kept_starts, kept_ends = starts[kept], ends[kept]
            parts = [t.split(sizes) for t in (kept_starts, kept_ends, embeddings, mention_scores)]
        else:
            empty = torch.zeros(0, dtype=torch.long, device=hidden.device)
            parts = [[empty] * count, [empty] * count]
            parts += [[hidden.new_zeros(0, self.span_dim)] * count, [hidden.new_zeros(0)] * count]
        return [
            (
                parts[0][position] - bounds[position],  # [k]: local to the segment
                parts[1][position] - bounds[position],
                parts[2][position],  # [k, D]
                parts[3][position],  # [k]
                kept_lists[position],
            )
            for position in range(count)
        ]

    def update_weight(self, entity: torch.Tensor, mention: torch.Tensor, size: int) -> torch.Tensor | float:
        """UPDATE's ``a`` in ``e <- a e + (1 - a) m``: ``sigmoid(FFNN([e; m]))``, or ``size / (size + 1)`` (mean).

        The pair scorer's candidate projection is linear, so it updates with the same ``a``.
        """
        if self.config.update == "mean":
            return size / (size + 1)
        return torch.sigmoid(self.alpha(torch.cat([entity, mention]))).squeeze(0)  # scalar

    def sampled_spans(self, spans: Sequence[Span], gold: GoldAntecedents) -> list[int]:
        """The rows of the spans a training pass reads: every gold span and, with ``negative_sample_rate`` r < 1,
        each other span with probability r (one host-side draw per span, made before any is read, so that
        the segment's passes score only these)."""
        rate = self.config.negative_sample_rate
        if rate >= 1.0:
            return list(range(len(spans)))
        draws = torch.rand(len(spans), device="cpu").tolist()
        return [index for index, span in enumerate(spans) if draws[index] < rate or gold.is_gold(span)]

    def coarse_floors(self, mention_scores: torch.Tensor) -> torch.Tensor | None:
        """At inference with ``min_coarse_score`` F, each span's least coarse score (prior + bilinear) for a column
        to go through the fine FFNN: ``F - s_m(m)`` ``[k]``, so that a pair's whole coarse score s_m(m) + s_m(j) +
        bilinear must exceed F, as the baseline's floor; None in training or without the setting."""
        if self.training or self.config.min_coarse_score is None:
            return None
        return self.config.min_coarse_score - mention_scores.detach().float()

    def may_start_entity(self, mention_score: float) -> bool:
        """False for a span too unlikely a mention to start an entity (``min_mention_score``; it may join one)."""
        threshold = self.config.min_mention_score
        return threshold is None or mention_score >= threshold

    def project_base_again(self, memory: EntityMemory, weights) -> None:
        """In training, the base columns' projections (the fine FFNN's first layer over the entities of earlier
        segments) computed again in this segment's graph: the entities are detached at each segment's end, not the
        layer, whose gradient takes every pair it scores, as Xia et al.'s code applies the layer to each entity
        anew (the projections kept from an earlier segment are detached: the layer's gradient through them was
        lost)."""
        if memory.base_embeddings is None or not torch.is_grad_enabled() or not weights[1].requires_grad:
            return
        memory.base_projections = self.pair_scorer.project_candidates(memory.base_embeddings, weights)  # [B, ffnn]

    def resolve_spans(
        self,
        memory: EntityMemory,
        starts: Sequence[int],
        ends: Sequence[int],
        embeddings: torch.Tensor,
        mention_scores: torch.Tensor,
        features: PairFeatures,
        gold: GoldAntecedents | None = None,
        train: bool = False,
        projections: SpanProjections | None = None,
    ) -> SegmentLoss | None:
        """Greedy decisions for one segment's spans in order (global subtoken offsets, host lists; ``embeddings``
        ``[k, D]``, ``mention_scores`` ``[k]``; ``projections``: theirs, if computed with other segments' spans,
        else computed here); in training, the options
        each decision had (``SegmentLoss``; its loss is computed with its window's, ``window_loss``), None when no
        span had any.

        The segment's scores are computed in batched passes (``SegmentScores``), the decisions taken on the host
        over them (``decide_segment``), and in training each span's options recorded in the passes, which ran
        with gradients (``SegmentLoss``). Training reads every gold span and the non-gold ones ``sampled_spans`` keeps.
        The segment is begun on ``memory`` here; the caller ends it (``EntityMemory.end_segment``).
        """
        spans = list(zip(starts, ends, strict=True))
        read = self.sampled_spans(spans, gold) if train and gold is not None else list(range(len(spans)))
        if len(read) < len(spans):  # only the spans read: [n, D], [n]
            rows = host_tensor(read, embeddings.device)  # [n]
            embeddings, mention_scores = embeddings.index_select(0, rows), mention_scores.index_select(0, rows)
        read_spans = [spans[index] for index in read]
        weights = self.pair_scorer.first_layer_parts()
        self.project_base_again(memory, weights)
        if projections is None or len(read) < len(spans):
            projections = self.span_projections(embeddings, weights)
        target_projections, candidate_projections, sources = projections  # [n, ffnn], [n, ffnn], [n, D] or None
        floors = self.coarse_floors(mention_scores)  # [n] or None
        table = memory.begin_segment(embeddings, candidate_projections, mention_scores)
        scores = SegmentScores(
            self,
            memory,
            table,
            read_spans,
            embeddings,
            target_projections,
            sources,
            mention_scores,
            features,
            weights,
            floors,
        )
        gold = gold if train else None
        loss = SegmentLoss(scores, mention_scores) if gold is not None else None
        scores.static_pass(memory, read_spans, gold)
        decide_segment(
            self, memory, table, scores, read_spans, embeddings, candidate_projections, mention_scores, gold, loss
        )
        return loss if loss else None

    def span_projections(self, embeddings: torch.Tensor, weights: FirstLayerParts | None = None) -> SpanProjections:
        """The pair scorer's projections of spans (``embeddings`` ``[k, D]``), computed once for every pair they
        take part in: one product each over as many spans as are given (several documents' at once in
        ``forward_group``, so that each weight matrix is read once a group, not once a document)."""
        weights = self.pair_scorer.first_layer_parts() if weights is None else weights
        targets = self.pair_scorer.project_targets(embeddings, weights)  # [k, ffnn]
        candidates = self.pair_scorer.project_candidates(embeddings, weights)  # [k, ffnn]
        sources = None  # [k, D]: the coarse projection, where the fine FFNN computes (bf16 at inference)
        if self.uses_coarse:
            with self.pair_scorer.inference_autocast(embeddings):
                sources = self.src_projection(embeddings)
        return SpanProjections(targets, candidates, sources)

    # ---------------------------------------------------------------- forward
    def read_segments(
        self,
        document: DocumentTensors,
        segment_hidden: EncodedSegments | None = None,
        train: bool = False,
        spans_of: Callable[[int, int], SegmentSpans] | None = None,
    ) -> Generator[torch.Tensor, None, IncrementalOutput]:
        """Read the document segment by segment; yield each segment's loss, return the output.

        With ``train`` the losses of a window of segments (the segments whose spans were scored together,
        ``SegmentSpans.ends_window``) are computed together (``window_loss``) and yielded at its end (a window
        without a loss adds nothing). The caller backpropagates the loss before asking for more: the entities
        are detached at each segment's end (truncated backpropagation), so memory does not grow with the
        document.
        ``segment_hidden`` may supply the encoder's outputs (``segment_outputs``: a cache for a
        frozen encoder, or the document already encoded); ``spans_of`` each segment's kept spans as a function of
        its index and offset (read with other documents': ``forward_group``), else ``span_windows`` reads them.
        """
        config = self.config
        memory = EntityMemory(config.recent_mentions, config.entity_representation)
        gold = GoldAntecedents(document, config.gold_entities == "latest_mention") if train else None
        features = PairFeatures.of_document(document, config)
        if spans_of is None:
            spans_of = self.span_windows(document, self.segment_outputs(document, segment_hidden), train)
        losses: list[torch.Tensor] = []  # each window's, detached: read once, at the end
        kept_spans: list[Span] = []
        offset = 0
        recorded: list[SegmentLoss] = []  # the options of the window's segments so far
        mention_losses: list[torch.Tensor] = []  # the window's segments' mention losses
        # Without read_last_sentence: each subtoken's sentence, on the host (one read a document).
        sentences = None if config.read_last_sentence else document.sentence_map.tolist()
        for index, length in enumerate(document.lengths()):
            found = spans_of(index, offset)
            if sentences is not None:
                found = without_last_sentence(found, sentences, offset + length - 1)
            for span in found.spans:
                features.rank_of_span[span] = len(kept_spans)
                kept_spans.append(span)
            starts, ends = [start for start, _ in found.spans], [end for _, end in found.spans]
            segment = self.resolve_spans(
                memory, starts, ends, found.embeddings, found.mention_scores, features, gold, train, found.projections
            )
            if segment is not None:
                recorded.append(segment)
            if found.mention_loss is not None:
                mention_losses.append(found.mention_loss)
            if found.ends_window and (recorded or mention_losses):
                loss = window_loss(recorded, config.threshold) if recorded else None
                for mention_loss in mention_losses:
                    loss = mention_loss if loss is None else loss + mention_loss
                recorded, mention_losses = [], []
                losses.append(loss.detach())
                if loss.requires_grad:
                    yield loss
            offset += length
            if train and not config.evict_in_training:
                memory.end_segment()
            else:
                memory.end_segment(
                    offset, config.evict_singleton_distance, config.evict_distance, config.evict_from == "start"
                )
            if gold is not None:
                gold.end_segment(memory, offset)
        total_loss = sum(torch.stack([loss.float() for loss in losses]).tolist()) if losses else 0.0
        total_loss = total_loss if train else None
        return IncrementalOutput(memory.clusters(), total_loss, memory, kept_spans)

    def forward(self, document: DocumentTensors, segment_hidden: EncodedSegments | None = None) -> IncrementalOutput:
        """The model's decisions on a whole document (inference: no loss is backpropagated)."""
        return read_to_the_end(self.read_segments(document, segment_hidden))

    def forward_group(
        self, documents: Sequence[DocumentTensors], hidden: Sequence[torch.Tensor]
    ) -> list[IncrementalOutput]:
        """Several documents predicted together (``hidden``: each one's encoder output ``[n_i, H]``), in evaluation
        mode: each one's output as :meth:`forward` gives it, to float32's rounding (the span scorer's products come
        in other shapes). The kept spans of the group's documents of one segment are read together
        (``group_spans``), so the span scorer's weights are read once a group instead of once a document; each
        document's entities are then decided on its own. A longer document is read as alone."""
        found = self.group_spans(documents, hidden)
        outputs = []
        for position, (document, encoded) in enumerate(zip(documents, hidden, strict=True)):
            spans_of = None if position not in found else (lambda index, offset, own=found[position]: own)
            outputs.append(read_to_the_end(self.read_segments(document, encoded, spans_of=spans_of)))
        return outputs

    def group_spans(
        self, documents: Sequence[DocumentTensors], hidden: Sequence[torch.Tensor]
    ) -> dict[int, SegmentSpans]:
        """The kept spans of the documents of one segment among ``documents`` (``hidden``: each one's encoder output
        ``[n_i, H]``), by position, read together as a long document's segments are (``window_spans``: one
        candidate pass and one kept-span pass over their subtokens, at most ``span_window_subtokens`` a pass), in
        evaluation mode: each as ``span_windows`` reads it alone, to float32's rounding."""
        if self.training:
            raise RuntimeError("forward_group predicts: put the model in evaluation mode (model.eval())")
        passes: list[list[int]] = []  # the one-segment documents read together, within span_window_subtokens
        tokens = 0
        for position, document in enumerate(documents):
            if document.num_segments != 1:
                continue
            if not passes or tokens + document.num_tokens > self.span_window_subtokens:
                passes.append([])
                tokens = 0
            passes[-1].append(position)
            tokens += document.num_tokens
        found: dict[int, SegmentSpans] = {}
        for members in passes:
            bounds, starts, ends = [0], [], []  # each document's first subtoken in the pass, then the pass's end
            for position in members:
                document = documents[position]
                starts_i, ends_i = self.candidate_spans(document, slice(0, document.num_tokens))  # [candidates_i]
                starts.append(starts_i + bounds[-1])
                ends.append(ends_i + bounds[-1])
                bounds.append(bounds[-1] + document.num_tokens)
            read = torch.cat([hidden[position] for position in members])  # [tokens, H]
            kept = self.window_spans(read, torch.cat(starts), torch.cat(ends), bounds)
            # the pair scorer's projections of the pass's kept spans in one product each
            projections = self.span_projections(torch.cat([embeddings for _, _, embeddings, _, _ in kept]))
            first = 0
            for position, (starts_k, ends_k, embeddings, scores, spans) in zip(members, kept, strict=True):
                own = projections.rows(first, first + embeddings.shape[0])
                found[position] = SegmentSpans(starts_k, ends_k, embeddings, scores, None, spans, True, own)
                first += embeddings.shape[0]
        return found

    def training_losses(
        self, document: DocumentTensors, segment_hidden: EncodedSegments | None = None
    ) -> Iterator[torch.Tensor]:
        """Each segment's training loss in turn, to be backpropagated before the next is computed."""
        yield from self.read_segments(document, segment_hidden, train=True)


def read_to_the_end(reader: Generator[torch.Tensor, None, IncrementalOutput]) -> IncrementalOutput:
    """``read_segments``' output, its losses (none are backpropagated) passed over."""
    while True:
        try:
            next(reader)
        except StopIteration as finished:
            return finished.value


def without_last_sentence(found: SegmentSpans, sentences: Sequence[int], last: int) -> SegmentSpans:
    """A segment's kept spans but those in the sentence of its last subtoken (``last``; ``sentences``: each
    subtoken's sentence): Xia et al.'s 2020 code reads a segment's sentences from its first subtoken's up to, not
    including, its last subtoken's (util.get_sentence_iter's ``range(min_sent, max_sent)``), so the spans of a
    segment's last sentence, or of the part of a sentence a segment ends in, are never read."""
    keep = [position for position, (start, _) in enumerate(found.spans) if sentences[start] < sentences[last]]
    if len(keep) == len(found.spans):
        return found
    rows = host_tensor(keep, found.embeddings.device)  # [kept]
    projections = found.projections
    if projections is not None:
        projections = SpanProjections(*(None if part is None else part.index_select(0, rows) for part in projections))
    return found._replace(
        starts=found.starts.index_select(0, rows),
        ends=found.ends.index_select(0, rows),
        embeddings=found.embeddings.index_select(0, rows),
        mention_scores=found.mention_scores.index_select(0, rows),
        spans=[found.spans[position] for position in keep],
        projections=projections,
    )


def copy_baseline_weights(model: IncrementalCorefModel, baseline_state: dict[str, torch.Tensor]) -> list[str]:
    """Copy the encoder, span scorer and pair scorer weights from a baseline state dict, by name.

    Returns the names copied. A weight of another shape is an error naming it and
    both shapes; the update network (``alpha``) is new and stays as initialised.
    """
    own = model.state_dict()
    copied = []
    mismatched = []
    missing = []
    for name, tensor in own.items():
        if not name.startswith(("encoder.", "span_scorer.", "pair_scorer.", "src_projection.")):
            continue
        if name not in baseline_state:
            missing.append(name)
            continue
        if baseline_state[name].shape != tensor.shape:
            mismatched.append(f"{name}: baseline {tuple(baseline_state[name].shape)}, configured {tuple(tensor.shape)}")
            continue
        copied.append(name)
    if mismatched or missing:
        details = "; ".join(mismatched + [f"{name}: not in the baseline" for name in missing])
        raise ValueError(f"the baseline's weights do not fit the incremental model's configuration ({details})")
    with torch.no_grad():
        for name in copied:
            own[name].copy_(baseline_state[name])
    logger.info("Copied %d weights from the baseline; the update network is new", len(copied))
    return copied
