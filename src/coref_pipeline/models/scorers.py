"""The scorers both models share: the span scorer (g and s_m) and the fine pair scorer.

Their parameter names are those of the original ``independent.py`` under a
``span_scorer.`` or ``pair_scorer.`` prefix, so the incremental model takes the
baseline's trained weights by name.

Two computations are rearranged without changing their value (tests compare
them with the direct form):

* the mention FFNN's first layer is linear in the parts of g = [h_start; h_end;
  width; head], so it is computed per token and summed per span: the head's part
  is the attention-weighted sum of the tokens' projections, summed from
  precomputed partial sums (spans.SpanAttentionTable), instead of materialising
  every candidate's g;
* the pair FFNN's first layer is split the same way: the target and candidate
  parts are projected once per span, only the product part is computed per pair.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import nn

from coref_pipeline.models.layers import FFNN, Dropout, init_weights
from coref_pipeline.models.lookups import LookupPart, LookupRows
from coref_pipeline.models.spans import SpanAttentionTable, prune_spans, span_attention_explicit
from coref_pipeline.runtime.onednn import cast_once, prediction_autocast

if TYPE_CHECKING:
    from coref_pipeline.models.config import BaselineConfig, IncrementalConfig

    ScorerConfig = BaselineConfig | IncrementalConfig  # a SpanModelConfig with its own dropout_rate

NUM_DISTANCE_BUCKETS = 10
# Candidate spans scored at a time without a graph on a CPU (``SpanScorer.score_candidates``; the last slice takes
# the remainder, up to twice as many): a slice's [slice, ffnn] rows (2 MB at 1,024 x 500 in float32) stay in the
# cache through the parts added to them, the ReLU and the output layer. One pass over LitBank-sized candidates
# (40,000 a document) runs them over memory: 80-83 ms a document against 57-60 ms in slices of 512 to 1,024, the peak
# memory of `predict` on LitBank test 646 MB against 793 MB (docs/benchmarks.md); the bits of one pass (by test).
CANDIDATE_SLICE = 1024
SPAN_SCORER_MODULES = (
    "span_width_embeddings",
    "mention_word_attn",
    "mention_scores",
    "span_width_prior_embeddings",
    "width_scores",
)
PAIR_SCORER_MODULES = (
    "same_speaker_emb",
    "genre_embeddings",
    "antecedent_distance_emb",
    "segment_distance_embeddings",
    "slow_antecedent_scores",
)


def _initialise(module: nn.Module) -> None:
    for child in module.modules():
        init_weights(child)


class TopSpans(NamedTuple):
    """``SpanScorer.top_spans``: what pruning keeps of a segment's (or a crop's) candidate spans."""

    candidate_scores: torch.Tensor  # [candidates]: every candidate's mention score (no graph unless a loss reads it)
    kept: torch.Tensor  # [k]: indices of the kept candidates, sorted by (start, end)
    scores: torch.Tensor  # [k]: their mention scores (in the graph in training)
    embeddings: torch.Tensor  # [k, D]: their g


class FirstLayerParts(NamedTuple):
    """``PairScorer.first_layer_parts``: the pair FFNN's first-layer weight by the input each part multiplies."""

    target: torch.Tensor  # [ffnn, D]
    candidate: torch.Tensor  # [ffnn, D]
    products: tuple[torch.Tensor, ...]  # [ffnn, D]; or with fixed columns, in training: [ffnn, fixed], [ffnn, rest]
    features: torch.Tensor | None  # [ffnn, features]; None without features


class FeatureTable(NamedTuple):
    """``PairScorer.feature_table``: every embedding phi concatenates, stacked into one table, so that a pair's
    phi is one lookup of its rows (``PairScorer.table_features``)."""

    weight: torch.Tensor  # [rows, feature_size]: the features' embeddings, in phi's order
    # Each configured feature ("speaker", "genre", "distance", "segment_distance"), in phi's order, and its first
    # row in ``weight``.
    firsts: tuple[tuple[str, int], ...]
    speakers: bool  # the same-speaker feature is embedded (else its slot is a row of zeros)


class CandidateScores(NamedTuple):
    """``SpanScorer.candidate_scores``: every candidate's mention score, without a graph, and the dropout masks it
    was computed with (drawn once per candidate), which ``kept_span_scores`` applies again to the kept ones."""

    scores: torch.Tensor  # [candidates]
    width_masks: torch.Tensor | None  # [candidates, F] bool: the width features' (None without dropout)
    ffnn_masks: list[torch.Tensor]  # the mention FFNN's, [candidates, ffnn] bool each (none without dropout)
    prior_masks: list[torch.Tensor]  # the width prior's FFNN's, [max_span_width, ffnn] bool each

    def rows(self, first: int, last: int) -> CandidateScores:
        """Candidates ``first`` to ``last - 1`` alone (views)."""
        return CandidateScores(
            self.scores[first:last],
            self.width_masks[first:last] if self.width_masks is not None else None,
            [mask[first:last] for mask in self.ffnn_masks],
            self.prior_masks,
        )


class SpanScorer(nn.Module):
    """Span representation g = [h_start; h_end; width; head] and mention score s_m (with the width prior)."""

    def __init__(self, config: ScorerConfig, hidden_size: int) -> None:
        super().__init__()
        self.config = config
        feature = config.feature_size
        self.dropout = Dropout(config.dropout_rate)
        self.span_width_embeddings = nn.Embedding(config.max_span_width, feature)
        self.mention_word_attn = nn.Linear(hidden_size, 1)
        self.span_dim = (
            2 * hidden_size + (feature if config.use_features else 0) + (hidden_size if config.model_heads else 0)
        )
        self.mention_scores = FFNN(self.span_dim, config.ffnn_size, config.ffnn_depth, 1, config.dropout_rate)
        self.span_width_prior_embeddings = nn.Embedding(config.max_span_width, feature)
        self.width_scores = FFNN(feature, config.ffnn_size, config.ffnn_depth, 1, config.dropout_rate)
        self.lookup_rows: LookupRows | None = None  # where the width lookups' gradient rows are counted, if anywhere
        _initialise(self)

    def width_features(self, starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
        """The (dropped-out) width embedding of each span: ``[spans, F]``; the lookup counted in
        ``lookup_rows`` when it is set (``optimiser: original``)."""
        widths = self.span_width_embeddings(ends - starts)  # [spans, F]
        if self.lookup_rows is not None:
            widths = self.lookup_rows.watch(widths, [(self.span_width_embeddings.weight, None)])
        return self.dropout(widths)

    def score_candidates(
        self,
        hidden: torch.Tensor,
        starts: torch.Tensor,
        ends: torch.Tensor,
        width_features: torch.Tensor,
        keep_masks: list[torch.Tensor] | None = None,
        width_prior: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Mention scores of every candidate without building their g: ``[num_candidates]``.

        ``keep_masks``: the mention FFNN's dropout masks (``FFNN.keep_masks``); None draws them.
        ``width_prior``: ``width_prior()``, computed once for several calls; None computes it.
        """
        h = hidden.shape[1]
        first = self.mention_scores.hidden[0]
        parts = [h, h] + ([width_features.shape[1]] if self.config.use_features else [])
        parts += [h] if self.config.model_heads else []
        weights = first.weight.split(parts, dim=1)  # each [ffnn, part]
        start_part = torch.addmm(first.bias, hidden, weights[0].T)  # [n, ffnn], the bias folded in
        end_part = hidden @ weights[1].T  # [n, ffnn]
        heads = None
        if self.config.model_heads and starts.numel():
            # W (sum_t a_t h_t) = sum_t a_t (W h_t): the head's attention sums run over the projected
            # tokens, [n, ffnn], instead of a [spans, H] x [H, ffnn] GEMM per candidate.
            logits = self.mention_word_attn(hidden).squeeze(1)  # [n]
            heads = SpanAttentionTable(logits, hidden @ weights[-1].T, int((ends - starts).max()))
        # Without a graph (prediction, the candidates' pass in training) the parts accumulate onto the start part's
        # rows in place: the same sums, two [spans, ffnn] passes and tensors fewer; on a CPU a slice of candidates
        # at a time, so that those passes run in the cache instead of over memory.
        in_place = not torch.is_grad_enabled() and start_part.dtype == torch.float32
        count = starts.shape[0]
        # Slices of CANDIDATE_SLICE rows, the last one taking the remainder: no GEMM of a few rows, which the BLAS
        # computes with other kernels (other roundings) than a long one.
        slices = max(1, count // CANDIDATE_SLICE) if in_place and hidden.device.type == "cpu" else 1
        bounds = [index * CANDIDATE_SLICE for index in range(slices)] + [count]
        scores = []
        for first_row, end_row in zip(bounds[:-1], bounds[1:], strict=True):
            rows = slice(first_row, end_row)
            pre = start_part.index_select(0, starts[rows])  # [slice, ffnn]
            if self.config.use_features:  # the width part, one GEMM accumulating onto the start part
                if in_place:
                    pre.addmm_(width_features[rows], weights[2].T)
                else:
                    pre = torch.addmm(pre, width_features[rows], weights[2].T)
            if heads is not None:
                if in_place:  # the table's sums are float32 whatever the values' dtype, as ``pre`` is here
                    heads.add_sums_to(pre, starts[rows], ends[rows])
                else:
                    pre.add_(heads.sums(starts[rows], ends[rows]))  # [slice, ffnn]
            pre.add_(end_part.index_select(0, ends[rows]))
            masks = [mask[rows] for mask in keep_masks] if keep_masks is not None else None
            scores.append(self.mention_scores.from_first_layer(pre, overwrite=True, keep_masks=masks).squeeze(1))
        scores = scores[0] if len(scores) == 1 else torch.cat(scores)  # [spans]
        return self._with_width_prior(scores, ends - starts, width_prior)  # [spans]

    def score_spans(
        self,
        embeddings: torch.Tensor,
        widths: torch.Tensor,
        keep_masks: list[torch.Tensor] | None = None,
        width_prior: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Mention scores of a few spans from their g (``span_embeddings``): ``[spans]``, the values
        ``score_candidates`` gives them (to float rounding) with the same ``keep_masks`` and ``width_prior``."""
        scores = self.mention_scores(embeddings, keep_masks).squeeze(1)
        return self._with_width_prior(scores, widths, width_prior)

    def width_prior(self, keep_masks: list[torch.Tensor] | None = None) -> torch.Tensor | None:
        """The learned prior score of each span width, ``[max_span_width]`` (None without ``use_prior``);
        ``keep_masks``: its FFNN's dropout masks (None draws them)."""
        if not self.config.use_prior:
            return None
        return self.width_scores(self.span_width_prior_embeddings.weight, keep_masks).squeeze(1)

    def _with_width_prior(
        self, scores: torch.Tensor, widths: torch.Tensor, width_prior: torch.Tensor | None = None
    ) -> torch.Tensor:
        if self.config.use_prior:
            prior = width_prior if width_prior is not None else self.width_prior()  # [W]
            scores = scores + prior[widths]
        return scores.float()  # pruning ranks these: fp32 under mixed precision too

    def top_spans(
        self,
        hidden: torch.Tensor,
        starts: torch.Tensor,
        ends: torch.Tensor,
        k: int,
        candidate_gradients: bool,
        kept_spans: list[tuple[int, int]] | None = None,
        crossing: bool = False,
    ) -> TopSpans:
        """Every candidate's mention score, then the ``k`` best spans that do not cross (``prune_spans``).

        When autograd records and no loss reads the candidates' scores (``candidate_gradients`` false:
        without the mention loss, or with it over the kept spans), the candidates are scored without a
        graph and the kept spans again from their g with the same dropout masks: the kept spans' scores
        and gradients are those of one pass over every candidate (to float rounding), but the backward
        pass runs over ``k`` rows instead of every candidate's. ``kept_spans``: a list that receives the kept
        spans' (start, end), known on the host (``prune_spans``; ``crossing``: its rule).
        """
        width_features = self.width_features(starts, ends)  # [candidates, F]
        split = torch.is_grad_enabled() and not candidate_gradients
        if not split:
            scores = self.score_candidates(hidden, starts, ends, width_features)  # [candidates]
        else:  # the random draws in the one pass's order: the FFNN's masks, then the prior's dropout
            masks = self.mention_scores.keep_masks(starts.shape[0], hidden.device)
            prior = self.width_prior()  # [W], in the graph
            with torch.no_grad():
                scores = self.score_candidates(hidden, starts, ends, width_features, masks, prior)
        kept = prune_spans(scores, starts, ends, k, kept_spans, crossing)  # [k], sorted by (start, end)
        kept_starts, kept_ends = starts[kept], ends[kept]
        embeddings = self.span_embeddings(hidden, kept_starts, kept_ends, width_features[kept])  # [k, D]
        if split:
            kept_masks = [mask[kept] for mask in masks]
            kept_scores = self.score_spans(embeddings, kept_ends - kept_starts, kept_masks, prior)
        else:
            kept_scores = scores[kept]
        return TopSpans(scores, kept, kept_scores, embeddings)

    def candidate_scores(self, hidden: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor) -> CandidateScores:
        """Every candidate's mention score without a graph (``hidden`` ``[n, H]``, ``starts``, ``ends`` into it) and
        the dropout masks drawn for it: ``top_spans``' candidate pass, for many segments at once (the kept spans are
        scored again with a graph, segment by segment: ``kept_span_scores``)."""
        count, device = starts.shape[0], hidden.device
        width_masks = None
        if self.dropout.active:
            width_masks = self.dropout.keep_mask((count, self.span_width_embeddings.embedding_dim), device)
        ffnn_masks = self.mention_scores.keep_masks(count, device)
        prior_masks = self.width_scores.keep_masks(self.config.max_span_width, device)
        with torch.no_grad():
            width_features = self.dropout(self.span_width_embeddings(ends - starts), width_masks)  # [candidates, F]
            prior = self.width_prior(prior_masks)  # [W]
            scores = self.score_candidates(hidden, starts, ends, width_features, ffnn_masks, prior)
        return CandidateScores(scores, width_masks, ffnn_masks, prior_masks)

    def kept_span_scores(
        self,
        hidden: torch.Tensor,
        starts: torch.Tensor,
        ends: torch.Tensor,
        kept: torch.Tensor,
        candidates: CandidateScores,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``kept`` (``[k]``) candidates' mention scores and embeddings ``[k]``, ``[k, D]`` (``hidden``
        ``[n, H]``: their segment's, ``starts``, ``ends``: every candidate's in it), with the dropout masks of their
        candidate scores: in training (autograd recording) in the graph, computed from g as ``top_spans``
        computes them; otherwise the candidate scores themselves."""
        kept_starts, kept_ends = starts[kept], ends[kept]  # [k]
        width_masks = candidates.width_masks[kept] if candidates.width_masks is not None else None
        width_features = self.dropout(self.span_width_embeddings(kept_ends - kept_starts), width_masks)  # [k, F]
        embeddings = self.span_embeddings(hidden, kept_starts, kept_ends, width_features)  # [k, D]
        if not torch.is_grad_enabled():
            return candidates.scores[kept], embeddings
        kept_masks = [mask[kept] for mask in candidates.ffnn_masks]
        prior = self.width_prior(candidates.prior_masks)  # [W], in the graph
        return self.score_spans(embeddings, kept_ends - kept_starts, kept_masks, prior), embeddings

    def span_embeddings(
        self, hidden: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor, width_features: torch.Tensor
    ) -> torch.Tensor:
        """g = [h_start; h_end; width; head] for a few spans: ``[spans, span_dim]``."""
        parts = [hidden[starts], hidden[ends]]
        if self.config.use_features:
            parts.append(width_features)
        if self.config.model_heads:
            logits = self.mention_word_attn(hidden).squeeze(1)  # [n]
            parts.append(span_attention_explicit(logits, hidden, starts, ends, self.config.max_span_width))
        return torch.cat(parts, dim=1)


class PairScorer(nn.Module):
    """The fine FFNN over [g_i; g_j; g_i * g_j; phi] (i the target, j the candidate) and phi's embeddings."""

    def __init__(self, config: ScorerConfig, span_dim: int, fixed_columns: int = 0) -> None:
        """``fixed_columns``: how many leading columns of every g it scores never take a gradient (a frozen
        encoder's h_start and h_end, when no scored entity mixes them with learned weights). In training
        the product part's GEMM is then split there, and its backward pass computes the input gradient
        of the other columns only; the parameters' gradients are the same."""
        super().__init__()
        self.config = config
        self.fixed_columns = fixed_columns
        feature = config.feature_size
        self.dropout = Dropout(config.dropout_rate)
        self.same_speaker_emb = nn.Embedding(2, feature)
        self.genre_embeddings = nn.Embedding(len(config.genres), feature)
        self.antecedent_distance_emb = nn.Embedding(NUM_DISTANCE_BUCKETS, feature)
        self.segment_distance_embeddings = nn.Embedding(config.max_training_sentences, feature)
        self.feature_size = feature * (
            2 * int(config.use_metadata) + int(config.use_features) + int(config.use_segment_distance)
        )
        self.span_dim = span_dim
        self.slow_antecedent_scores = FFNN(
            3 * span_dim + self.feature_size, config.ffnn_size, config.ffnn_depth, 1, config.dropout_rate
        )
        self.inference_dtype: torch.dtype | None = None  # set by ``computing_in``; None: the caller's precision
        _initialise(self)

    @contextmanager
    def computing_in(self, dtype: torch.dtype | None) -> Iterator[None]:
        """Within it, :meth:`scores` computes under autocast to ``dtype`` where no gradient is recorded and the
        caller has no autocast of its own (None: as the caller computes), and returns float32. Inference on a
        CPU with native bf16 uses it: the pair FFNN's first layer is the head's largest GEMM, and in bf16 it
        takes a fifth of its fp32 time there (docs/benchmarks.md, "Throughput of ``predict`` on a CPU")."""
        previous, self.inference_dtype = self.inference_dtype, dtype
        try:
            yield
        finally:
            self.inference_dtype = previous

    def enters_inference_dtype(self, like: torch.Tensor) -> bool:
        """Whether :meth:`scores` called now on tensors like ``like`` enters autocast to ``inference_dtype``: one is
        set, no gradient is recorded and the caller has no autocast of its own on that device."""
        return (
            self.inference_dtype is not None
            and not torch.is_grad_enabled()
            and not torch.is_autocast_enabled(like.device.type)
        )

    def inference_autocast(self, like: torch.Tensor) -> AbstractContextManager:
        """Autocast to ``inference_dtype`` where :meth:`scores` enters it (``enters_inference_dtype``), else nothing:
        for the coarse scorer's bilinear term, whose two GEMMs over the kept spans compute where the fine FFNN does."""
        if self.enters_inference_dtype(like):
            return prediction_autocast(like.device, self.inference_dtype)
        return nullcontext()

    def scoring_dtype(self, like: torch.Tensor) -> torch.dtype:
        """The dtype :meth:`scores` multiplies in when called now on tensors like ``like``: ``inference_dtype``
        where it enters it, else ``compute_dtype``. A caller that gathers many pairs' rows without a graph casts
        its tables to it first: ``scores`` casts each row it gathers to it anyway (the same values), and a table
        cast once is a fraction of the pairs' fp32 copies."""
        return self.inference_dtype if self.enters_inference_dtype(like) else compute_dtype(like)

    def features(
        self,
        same_speaker: torch.Tensor | None,
        genre: int | torch.Tensor,
        distance_buckets: torch.Tensor,
        segment_distance: torch.Tensor,
        dropout: bool = True,
    ) -> torch.Tensor | None:
        """phi = [same speaker; genre; distance bucket; segment distance]: ``[k, c, features]``.

        ``same_speaker`` None puts zeros in the speaker slot (entities have no speaker). ``genre``: the document's,
        or each target's ``[k]`` (several documents scored together). ``dropout`` False: phi before its dropout (a
        caller that applies it at each use, as the original does in each round).
        """
        k, c = distance_buckets.shape
        features = []
        if self.config.use_metadata:
            if same_speaker is None:
                features.append(distance_buckets.new_zeros((k, c, self.config.feature_size), dtype=torch.float))
            else:
                features.append(self.same_speaker_emb(same_speaker.long()))
            genres = self.genre_embeddings.weight[genre]  # [F], or [k, F] from each target's genre
            features.append((genres if genres.dim() == 1 else genres.unsqueeze(1)).expand(k, c, -1))
        if self.config.use_features:
            features.append(self.antecedent_distance_emb(distance_buckets))
        if self.config.use_segment_distance:
            features.append(self.segment_distance_embeddings(segment_distance))
        if not features:
            return None
        features = torch.cat(features, dim=2)  # [k, c, features]
        return self.dropout(features) if dropout else features

    def feature_lookups(self) -> list[LookupPart]:
        """phi's columns that the original looks up in each round of its fine scoring (``tf.gather`` of the
        speaker, distance and segment-distance embeddings), with their embeddings; the genre's lookup is made
        once, before the rounds, and counted with its dense gradient."""
        config, feature = self.config, self.config.feature_size
        parts: list[LookupPart] = []
        first = 0
        if config.use_metadata:
            parts.append((self.same_speaker_emb.weight, slice(0, feature)))
            first = 2 * feature  # the genre's columns follow the speaker's
        if config.use_features:
            parts.append((self.antecedent_distance_emb.weight, slice(first, first + feature)))
            first += feature
        if config.use_segment_distance:
            parts.append((self.segment_distance_embeddings.weight, slice(first, first + feature)))
        return parts

    def feature_table(self, speakers: bool) -> FeatureTable | None:
        """The embeddings ``features`` concatenates, stacked into one table (one concatenation, in the graph),
        for a caller computing phi of many pairs from their indices in several passes (``table_features``): one
        lookup a pass, and one embedding gradient, instead of one per feature. ``speakers`` False: zeros in
        the speaker slot, as ``features`` with ``same_speaker`` None. None without features."""
        config = self.config
        tables: list[tuple[str, torch.Tensor]] = []
        if config.use_metadata:
            weight = self.genre_embeddings.weight
            speaker = self.same_speaker_emb.weight if speakers else weight.new_zeros(1, config.feature_size)
            tables += [("speaker", speaker), ("genre", weight)]
        if config.use_features:
            tables.append(("distance", self.antecedent_distance_emb.weight))
        if config.use_segment_distance:
            tables.append(("segment_distance", self.segment_distance_embeddings.weight))
        if not tables:
            return None
        firsts, first = [], 0
        for name, table in tables:
            firsts.append((name, first))
            first += table.shape[0]
        return FeatureTable(torch.cat([table for _, table in tables]), tuple(firsts), speakers)

    def table_features(self, table: FeatureTable, rows: torch.Tensor) -> torch.Tensor:
        """phi of pairs from their rows in ``table`` (``rows`` ``[P, features used]``, each feature's index plus
        its first row): ``[P, 1, features]``, the values ``features`` gives (with dropout drawn as it draws it)."""
        embedded = nn.functional.embedding(rows, table.weight)  # [P, features used, feature_size]
        return self.dropout(embedded.view(rows.shape[0], 1, -1))  # [P, 1, features]

    def first_layer_parts(self, dtype: torch.dtype | None = None) -> FirstLayerParts:
        """The first layer's weight split into target, candidate, product (and feature) parts, in ``dtype`` (None:
        the compute dtype, bf16 under bf16 autocast).

        A caller scoring many times in one graph splits once and passes the parts
        on: every split adds a full-size gradient copy to the backward pass. With ``fixed_columns``, in
        training, the product part comes in two, its fixed columns and the rest (``scores`` splits its GEMM
        there): one split for both. Under autocast the parts are in its compute dtype (bf16), cast once; without a
        gradient (prediction) the weight's copy in that dtype is made once while it does not change
        (``runtime.onednn.cast_once``), not at every call (each segment of the incremental model's).
        """
        d = self.span_dim
        fixed = self.fixed_columns if torch.is_grad_enabled() else 0
        sizes = [d, d] + ([fixed, d - fixed] if fixed else [d]) + ([self.feature_size] if self.feature_size else [])
        weight = self.slow_antecedent_scores.hidden[0].weight
        dtype = compute_dtype(weight) if dtype is None else dtype
        if dtype != weight.dtype and not torch.is_grad_enabled():
            weight = cast_once(weight, dtype)
        parts = weight.split(sizes, dim=1)  # each [ffnn, part]
        if dtype != weight.dtype:
            # Cast once here: autocast caches the casts of whole weights, not of these views, and
            # would otherwise cast a part again at every matmul that uses it.
            parts = tuple(part.to(dtype) for part in parts)
        products = tuple(parts[2:4]) if fixed else (parts[2],)
        return FirstLayerParts(parts[0], parts[1], products, parts[2 + len(products)] if self.feature_size else None)

    def project_candidates(self, candidates: torch.Tensor, parts: FirstLayerParts | None = None) -> torch.Tensor:
        """The candidate part of the first layer, ``[N, ffnn]``; reusable while the candidates do not change."""
        return candidates @ (parts or self.first_layer_parts())[1].T

    def project_targets(self, targets: torch.Tensor, parts: FirstLayerParts | None = None) -> torch.Tensor:
        """The target part of the first layer with its bias: ``[k, ffnn]``."""
        return targets @ (parts or self.first_layer_parts())[0].T + self.slow_antecedent_scores.hidden[0].bias

    def scores(
        self,
        targets: torch.Tensor,
        candidates: torch.Tensor,
        index: torch.Tensor,
        features: torch.Tensor | None,
        candidate_projection: torch.Tensor | None = None,
        parts: FirstLayerParts | None = None,
        target_projection: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """FFNN([t_i; c_j; t_i * c_j; phi_ij]) for ``j = index[i, :]``: ``[k, c]``.

        ``targets`` is ``[k, D]``, ``candidates`` ``[N, D]``, ``index`` ``[k, c]`` into the candidates.
        ``candidate_projection`` (``project_candidates``) and ``target_projection``
        (``project_targets``) may be passed when already computed.
        """
        if self.enters_inference_dtype(targets):
            with prediction_autocast(targets.device, self.inference_dtype):
                return self.scores(targets, candidates, index, features, candidate_projection, parts, target_projection)
        weights = parts or self.first_layer_parts()
        if candidate_projection is None:
            candidate_projection = self.project_candidates(candidates, weights)  # [N, ffnn]
        if target_projection is None:
            target_projection = self.project_targets(targets, weights)  # [k, ffnn]
        k, c = index.shape
        flat = index.reshape(-1)  # [k * c]
        # The product is formed in the compute dtype (bf16 under bf16 autocast): the [k, c, D] tensor is
        # then written once, not written in fp32 and copied again for the GEMM.
        dtype = compute_dtype(targets)
        # One GEMM adds the product part to the gathered candidate part, a second one (K = features)
        # the features; all on the flat [k * c, ffnn] tensor, without in-place writes through a view,
        # whose backward would zero-fill and copy the whole tensor again.
        pre = candidate_projection.index_select(0, flat)  # [k * c, ffnn]
        products = weights.products  # two with fixed columns in training (first_layer_parts): the GEMM split there
        split = products[0].shape[1] if len(products) > 1 else 0
        for columns, tracked, product in (
            ((slice(0, split), False, products[0]), (slice(split, None), True, products[1]))
            if split
            else ((None, True, products[0]),)
        ):
            part_targets, part_candidates = targets, candidates
            if columns is not None:
                part_targets, part_candidates = targets[:, columns], candidates[:, columns]
            if not tracked:  # no gradient would reach them: autograd then skips this part's input gradient
                part_targets, part_candidates = part_targets.detach(), part_candidates.detach()
            similarity = as_dtype(part_targets, dtype).unsqueeze(1) * as_dtype(part_candidates, dtype).index_select(
                0, flat
            ).view(k, c, -1)  # [k, c, D or part of it]
            pre = torch.addmm(pre, similarity.view(k * c, -1), product.T)  # [k * c, ffnn]
        if features is not None:
            pre = torch.addmm(pre, features.reshape(k * c, -1), weights.features.T)
        # The target part in pre's dtype: a bf16 + fp32 broadcast add takes a scalar path on a CPU
        # (30x slower than bf16 + bf16 on [k, c, ffnn]), and the next layer computes in bf16 anyway.
        # Without autograd (prediction) it is added in place: one [k, c, ffnn] tensor fewer.
        target_part = as_dtype(target_projection, pre.dtype).unsqueeze(1)  # [k, 1, ffnn]
        if pre.requires_grad:
            pre = pre.view(k, c, -1) + target_part  # [k, c, ffnn]
        else:
            pre = pre.view(k, c, -1).add_(target_part)
        scores = self.slow_antecedent_scores.from_first_layer(pre, overwrite=True).squeeze(2)  # [k, c]
        return as_dtype(scores, torch.float)  # fp32 for the loss

    def scores_where(
        self,
        scored: torch.Tensor,
        targets: torch.Tensor,
        candidates: torch.Tensor,
        index: torch.Tensor,
        features: torch.Tensor | None,
        candidate_projection: torch.Tensor | None = None,
        parts: FirstLayerParts | None = None,
        target_projection: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``scores`` of the pairs where ``scored`` (``[k, c]`` bool) holds, packed into one batch; -inf
        elsewhere: ``[k, c]``. The FFNN's cost follows the pairs scored, not ``k * c``."""
        rows, columns = scored.nonzero(as_tuple=True)  # [pairs] each
        result = torch.full(index.shape, float("-inf"), device=index.device)  # [k, c], fp32 as ``scores``
        if not rows.numel():
            return result
        weights = parts or self.first_layer_parts()
        # Cast to the dtype ``scores`` multiplies in per target, then gathered per pair: in bf16 (autocast, or the
        # inference dtype ``scores`` enters), no fp32 [pairs, D] or [pairs, ffnn] copies.
        dtype = self.scoring_dtype(targets)
        if target_projection is None:
            target_projection = self.project_targets(targets, weights)  # [k, ffnn]
        packed = self.scores(
            as_dtype(targets, dtype).index_select(0, rows),  # [pairs, D]: each pair its own target
            candidates,
            index[rows, columns].unsqueeze(1),  # [pairs, 1]
            None if features is None else features[rows, columns].unsqueeze(1),  # [pairs, 1, features]
            candidate_projection=candidate_projection,
            parts=weights,
            target_projection=as_dtype(target_projection, dtype).index_select(0, rows),  # [pairs, ffnn]
        )  # [pairs, 1]
        result[rows, columns] = packed.squeeze(1)
        return result


def as_dtype(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``tensor.to(dtype)``, without an operator call when it is already of that dtype (the common case: fp32
    without autocast), which would still be one dispatch."""
    return tensor if tensor.dtype == dtype else tensor.to(dtype)


def compute_dtype(tensor: torch.Tensor) -> torch.dtype:
    """The dtype matmuls on ``tensor``'s device compute in: autocast's when it is on, else the tensor's."""
    device_type = tensor.device.type
    if device_type in ("cpu", "cuda", "mps") and torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return tensor.dtype


def upgrade_version_1_names(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Weights saved before the scorers were modules (format 1) under today's names."""
    upgraded = {}
    for name, tensor in state_dict.items():
        head = name.split(".", 1)[0]
        if head in SPAN_SCORER_MODULES:
            name = f"span_scorer.{name}"
        elif head in PAIR_SCORER_MODULES:
            name = f"pair_scorer.{name}"
        upgraded[name] = tensor
    return upgraded
