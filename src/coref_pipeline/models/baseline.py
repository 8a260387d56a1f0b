"""The coarse-to-fine span-ranking model of "BERT for Coreference Resolution" (Joshi et al.).

Everything follows the original ``independent.py``. The span scorer and the
fine pair scorer live in ``scorers.py`` (the incremental model shares them);
this module adds the coarse bilinear scorer, antecedent pruning, the
higher-order refinement and the loss.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from coref_pipeline.models.config import BaselineConfig, require_resolved
from coref_pipeline.models.document import DocumentTensors
from coref_pipeline.models.encoder import SegmentEncoder
from coref_pipeline.models.layers import Dropout, init_weights
from coref_pipeline.models.lookups import LookupRows, watch_embedding
from coref_pipeline.models.scorers import NUM_DISTANCE_BUCKETS, PairScorer, SpanScorer
from coref_pipeline.models.spans import (
    bucket_distance,
    gold_mention_loss,
    overlapping_pairs,
    prune_spans,
    span_cluster_ids,
    top_k_in_order,
)


@dataclass
class CorefOutput:
    """What the model computed for one document (``k`` kept spans, ``c`` antecedents each)."""

    candidate_starts: torch.Tensor  # [num_candidates]
    candidate_ends: torch.Tensor  # [num_candidates]
    candidate_mention_scores: torch.Tensor  # [num_candidates]
    top_span_starts: torch.Tensor  # [k]
    top_span_ends: torch.Tensor  # [k]
    top_span_mention_scores: torch.Tensor  # [k]
    top_span_emb: torch.Tensor  # [k, span_dim]: the embeddings the last fine scores were computed from
    top_antecedents: torch.Tensor  # [k, c] indices into the kept spans
    top_antecedent_mask: torch.Tensor  # [k, c] bool: a real, earlier antecedent
    top_antecedent_scores: torch.Tensor  # [k, c + 1], column 0 the dummy antecedent (score 0)
    loss: torch.Tensor | None = None


class BaselineCorefModel(nn.Module):
    """Encoder, span scorer, coarse bilinear scorer and fine pair FFNN with higher-order refinement."""

    def __init__(self, config: BaselineConfig, encoder: SegmentEncoder) -> None:
        super().__init__()
        require_resolved(config)
        self.config = config
        self.encoder = encoder
        feature = config.feature_size
        self.dropout = Dropout(config.dropout_rate)
        self.span_scorer = SpanScorer(config, encoder.hidden_size)
        self.span_dim = self.span_scorer.span_dim
        # Coarse stage.
        self.src_projection = nn.Linear(self.span_dim, self.span_dim)
        self.antecedent_distance_prior = nn.Embedding(NUM_DISTANCE_BUCKETS, feature)
        self.distance_prior_projection = nn.Linear(feature, 1)
        # Fine stage.
        self.pair_scorer = PairScorer(config, self.span_dim)
        self.gate = nn.Linear(2 * self.span_dim, self.span_dim)
        for name in ("src_projection", "antecedent_distance_prior", "distance_prior_projection", "gate"):
            init_weights(getattr(self, name))
        self.lookup_rows: LookupRows | None = None  # where lookups' gradient rows are counted (count_lookup_rows)
        self._lookup_hook: torch.utils.hooks.RemovableHandle | None = None

    def lookup_parameters(self) -> list[nn.Parameter]:
        """The embeddings the original looks up with ``tf.gather`` in training, whose gradients TensorFlow holds as
        ``IndexedSlices`` (one row per lookup): the encoder's word embeddings, the span widths', and the fine
        scoring's speaker, distance and segment-distance embeddings (each round's lookups). The genre's lookup is one
        row there (made once, before the rounds), whose norm is its dense gradient's; the width prior's and the
        coarse distance prior's gradients are dense there (a whole table scored before its rows are gathered)."""
        config = self.config
        parameters = [self.encoder.model.get_input_embeddings().weight]
        if config.use_features:
            parameters.append(self.span_scorer.span_width_embeddings.weight)
        if config.fine_grained:
            parameters += [parameter for parameter, _ in self.pair_scorer.feature_lookups()]
        return parameters

    def count_lookup_rows(self, rows: LookupRows | None) -> None:
        """Count every training lookup of :meth:`lookup_parameters` in ``rows`` (None: stop counting)."""
        if self._lookup_hook is not None:
            self._lookup_hook.remove()
            self._lookup_hook = None
        self.lookup_rows = self.span_scorer.lookup_rows = rows
        if rows is not None:
            self._lookup_hook = watch_embedding(rows, self.encoder.model.get_input_embeddings())

    def task_modules(self) -> list[nn.Module]:
        """Every module but the encoder (the task parameters)."""
        return [module for name, module in self.named_children() if name != "encoder"]

    # ------------------------------------------------------------ antecedents
    def coarse_scores(self, span_emb: torch.Tensor, mention_scores: torch.Tensor) -> torch.Tensor:
        """s_m(i) + s_m(j) + g_i' W g_j + distance prior, -inf where j is not before i: ``[k, k]`` (``span_emb``
        ``[..., k, D]`` and ``mention_scores`` ``[..., k]``, several documents' spans side by side: ``[..., k, k]``)."""
        k = span_emb.shape[-2]
        positions = torch.arange(k, device=span_emb.device)  # [k]
        offsets = positions.unsqueeze(1) - positions.unsqueeze(0)  # [k, k]
        scores = mention_scores.unsqueeze(-1) + mention_scores.unsqueeze(-2)  # [k, k]
        scores = scores.masked_fill(offsets < 1, float("-inf"))
        if self.config.coarse_to_fine:
            with self.pair_scorer.inference_autocast(span_emb):  # where the fine FFNN computes (bf16 at inference)
                source = self.dropout(self.src_projection(span_emb))  # [k, D]
                bilinear = source @ self.dropout(span_emb).transpose(-1, -2)  # [k, k]
            scores = scores + bilinear.float()  # fp32 for top-k under mixed precision
        if self.config.use_prior:
            prior = self.distance_prior_projection(self.dropout(self.antecedent_distance_prior.weight))  # [10, 1]
            # each offset's bucket looked up from the k offsets' (the same buckets: [j >= i] is -inf anyway), not
            # computed over [k, k] (a float log a pair)
            buckets = bucket_distance(positions)[offsets.clamp(min=0)]  # [k, k]
            scores = scores + prior.squeeze(1)[buckets]
        return scores

    def top_antecedents(self, coarse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The ``max_top_antecedents`` best antecedents per span: indices, mask, coarse scores ``[k, c]`` (``coarse``
        ``[..., k, k]``: ``[..., k, c]``)."""
        k = coarse.shape[-1]
        c = min(self.config.max_top_antecedents, k)
        positions = torch.arange(k, device=coarse.device)  # [k]
        if self.config.coarse_to_fine:
            antecedents = top_k_in_order(coarse, c)  # [k, c]
        else:  # distance pruning: the c closest preceding spans
            antecedents = (positions.unsqueeze(1) - 1 - positions[:c].unsqueeze(0)).clamp(min=0)
            antecedents = antecedents.expand(*coarse.shape[:-1], c)
        top_scores = coarse.gather(-1, antecedents)  # [k, c]
        mask = antecedents < positions.unsqueeze(1)  # [k, c]
        if not self.config.overlapping_antecedents:  # an overlapping antecedent is no antecedent (coarse -inf)
            mask &= top_scores > float("-inf")
        top_scores = top_scores.masked_fill(~mask, float("-inf"))
        return antecedents, mask, top_scores

    def pair_features(
        self,
        antecedents: torch.Tensor,
        span_starts: torch.Tensor,
        speaker_ids: torch.Tensor,
        segment_of_token: torch.Tensor,
        genre: int | torch.Tensor,
    ) -> torch.Tensor | None:
        """phi: same speaker, genre (the document's, or each span's ``[k]``), antecedent distance bucket, segment
        distance: ``[k, c, features]``, before its dropout (drawn in each round of the fine scoring, as the original
        draws it)."""
        k = antecedents.shape[0]
        span_speakers = speaker_ids[span_starts]  # [k]
        same_speaker = span_speakers.unsqueeze(1) == span_speakers[antecedents]  # [k, c]
        distance = bucket_distance(torch.arange(k, device=antecedents.device).unsqueeze(1) - antecedents)  # [k, c]
        segments = segment_of_token[span_starts]  # [k]
        segment_distance = (segments.unsqueeze(1) - segments[antecedents]).clamp(
            0, self.config.max_training_sentences - 1
        )  # [k, c]
        return self.pair_scorer.features(same_speaker, genre, distance, segment_distance, dropout=False)

    def refine(self, span_emb: torch.Tensor, antecedents: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """One round of higher-order refinement: each span gated with its attended antecedents, ``[k, D]``."""
        dummy = scores.new_zeros(scores.shape[0], 1)
        weights = torch.softmax(torch.cat([dummy, scores], dim=1), dim=1)  # [k, c + 1]
        candidates = torch.cat([span_emb.unsqueeze(1), span_emb[antecedents]], dim=1)  # [k, c + 1, D]
        attended = (weights.unsqueeze(2) * candidates).sum(dim=1)  # [k, D]
        gate = torch.sigmoid(self.gate(torch.cat([span_emb, attended], dim=1)))  # [k, D]
        return gate * attended + (1 - gate) * span_emb

    def fine_scores(
        self,
        span_emb: torch.Tensor,
        antecedents: torch.Tensor,
        features: torch.Tensor | None,
        scored: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """FFNN([g_i; g_j; g_i * g_j; phi]) for every kept pair: ``[k, c]``.

        ``scored`` (``[k, c]`` bool): only those pairs go through the FFNN, packed into one
        batch; the others are -inf.
        """
        if scored is None:
            return self.pair_scorer.scores(span_emb, span_emb, antecedents, features)
        return self.pair_scorer.scores_where(scored, span_emb, span_emb, antecedents, features)

    def antecedent_scores(
        self,
        span_emb: torch.Tensor,
        antecedents: torch.Tensor,
        top_coarse: torch.Tensor,
        features: torch.Tensor | None,
        scored: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The kept pairs' scores, the dummy's column first: ``[k, c + 1]``, and the spans' embeddings after the
        refinement rounds ``[k, D]``. Coarse alone, or coarse plus the fine score in each of ``coref_depth`` rounds,
        each span refined with its attended antecedents between two rounds; ``features`` (``pair_features``)
        with their lookups counted and their dropout drawn anew each round, as the original draws them;
        ``scored`` as :meth:`fine_scores` reads it."""
        config = self.config
        scores = top_coarse  # [k, c]
        if config.fine_grained:
            for depth in range(config.coref_depth):
                phi = features
                if phi is not None and self.lookup_rows is not None:  # each round's lookups, as the original's
                    phi = self.lookup_rows.watch(phi, self.pair_scorer.feature_lookups())
                phi = self.pair_scorer.dropout(phi) if phi is not None else None
                scores = top_coarse + self.fine_scores(span_emb, antecedents, phi, scored)  # [k, c]
                if depth + 1 < config.coref_depth:  # the original also refines after the last round: unused
                    span_emb = self.refine(span_emb, antecedents, scores)
        return torch.cat([scores.new_zeros(scores.shape[0], 1), scores], dim=1), span_emb

    # ---------------------------------------------------------------- forward
    def encode(self, document: DocumentTensors) -> torch.Tensor:
        """The document's subtoken representations ``[num_subtokens, H]``: the model's one call of its encoder."""
        return self.encoder(document.input_ids, document.attention_mask, document.lengths())

    def forward(
        self, document: DocumentTensors, with_loss: bool = True, hidden: torch.Tensor | None = None
    ) -> CorefOutput:
        """The document's spans, antecedents and scores; the loss too in training, or when the document
        has gold mentions and ``with_loss`` (prediction passes False: it reads only the scores).
        ``hidden``: the document already encoded (``encode``'s ``[num_subtokens, H]``); None encodes it here."""
        config = self.config
        hidden = self.encode(document) if hidden is None else hidden  # [n, H]
        num_tokens = hidden.shape[0]
        starts, ends = self.candidate_spans(document)
        k = self.kept_span_count(num_tokens, starts.shape[0])
        candidate_loss = bool(config.mention_loss_coef) and config.mention_loss_spans == "candidates"
        mention_scores, kept, top_scores, span_emb = self.span_scorer.top_spans(
            hidden, starts, ends, k, candidate_gradients=candidate_loss
        )  # [num_candidates], [k], [k], [k, D]
        top_starts, top_ends = starts[kept], ends[kept]

        coarse = self.coarse_scores(span_emb, top_scores)  # [k, k]
        if not config.overlapping_antecedents:
            coarse = coarse.masked_fill(overlapping_pairs(top_starts, top_ends), float("-inf"))
        antecedents, antecedent_mask, top_coarse = self.top_antecedents(coarse)  # [k, c]
        features = scored = None
        if config.fine_grained:
            features = self.pair_features(
                antecedents, top_starts, document.speaker_ids, document.segment_of_token, document.genre
            )
            if not self.training and config.min_coarse_score is not None:  # only the pairs above it
                scored = top_coarse > config.min_coarse_score  # [k, c]
        antecedent_scores, span_emb = self.antecedent_scores(span_emb, antecedents, top_coarse, features, scored)
        output = CorefOutput(
            candidate_starts=starts,
            candidate_ends=ends,
            candidate_mention_scores=mention_scores,
            top_span_starts=top_starts,
            top_span_ends=top_ends,
            top_span_mention_scores=top_scores,
            top_span_emb=span_emb,
            top_antecedents=antecedents,
            top_antecedent_mask=antecedent_mask,
            top_antecedent_scores=antecedent_scores,
        )
        if self.training or (with_loss and document.gold_starts.numel()):
            output.loss = self.loss(output, document)
        return output

    def candidate_spans(self, document: DocumentTensors) -> tuple[torch.Tensor, torch.Tensor]:
        """The document's candidate spans by the model's rules: starts and ends ``[num_candidates]``."""
        config = self.config
        return document.candidate_spans(
            config.max_span_width, config.word_boundary_spans, special_tokens=config.special_token_spans
        )

    def kept_span_count(self, num_tokens: int, num_candidates: int) -> int:
        """How many of a document's candidate spans pruning keeps: ``top_span_ratio`` of its subtokens, at most
        ``max_num_extracted_spans``, at least one where it has a candidate."""
        config = self.config
        k = min(config.max_num_extracted_spans, int(num_tokens * config.top_span_ratio), num_candidates)
        return max(k, 1) if num_candidates else 0

    def forward_group(self, documents: Sequence[DocumentTensors], hidden: Sequence[torch.Tensor]) -> list[CorefOutput]:
        """Several documents predicted together (``hidden``: each one's encoder output ``[n_i, H]``), in evaluation
        mode: each one's output as :meth:`forward` gives it without a loss, in its own positions, to float32's
        rounding (the products come in other shapes). The head's weights are read once a group instead of once a
        document, and its operators run once: every candidate of the group scored in one pass over their subtokens,
        each document pruned to its own spans, then the documents' kept spans side by side (``[G, w, ...]``, ``w``
        the most any kept, the rest padding that scores -inf) through one coarse projection, each span's
        antecedents among its own document's spans, and one fine pass over the group's pairs."""
        if self.training:
            raise RuntimeError("forward_group predicts: put the model in evaluation mode (model.eval())")
        config, device = self.config, hidden[0].device
        token_offsets = [0]
        for document in documents[:-1]:
            token_offsets.append(token_offsets[-1] + document.num_tokens)
        spans = [self.candidate_spans(document) for document in documents]  # each [num_candidates_i] x 2
        candidate_bounds = [0]
        for starts_i, _ in spans:
            candidate_bounds.append(candidate_bounds[-1] + starts_i.shape[0])
        tokens = torch.cat(list(hidden))  # [N, H]: the group's subtokens
        starts = torch.cat([starts_i + offset for (starts_i, _), offset in zip(spans, token_offsets, strict=True)])
        ends = torch.cat([ends_i + offset for (_, ends_i), offset in zip(spans, token_offsets, strict=True)])
        width_features = self.span_scorer.width_features(starts, ends)  # [C, F]
        mention_scores = self.span_scorer.score_candidates(tokens, starts, ends, width_features)  # [C]
        kept_parts = []
        for index, document in enumerate(documents):
            first, last = candidate_bounds[index], candidate_bounds[index + 1]
            k = self.kept_span_count(document.num_tokens, last - first)
            kept_parts.append(prune_spans(mention_scores[first:last], starts[first:last], ends[first:last], k) + first)
        counts = [part.shape[0] for part in kept_parts]
        kept = torch.cat(kept_parts)  # [K], each document's in (start, end) order
        width = max(max(counts), 1)
        # each kept span's row in the documents-side-by-side layout [G * w]
        rows = torch.cat([torch.arange(count, device=device) + index * width for index, count in enumerate(counts)])
        span_emb = self.span_scorer.span_embeddings(tokens, starts[kept], ends[kept], width_features[kept])  # [K, D]
        side_by_side = len(documents) * width
        emb = span_emb.new_zeros(side_by_side, span_emb.shape[1]).index_copy_(0, rows, span_emb)  # [G * w, D]
        top_scores = mention_scores.new_full((side_by_side,), float("-inf")).index_copy_(0, rows, mention_scores[kept])
        top_starts = starts.new_zeros(side_by_side).index_copy_(0, rows, starts[kept])  # [G * w], in the group's
        top_ends = ends.new_zeros(side_by_side).index_copy_(0, rows, ends[kept])
        grid = (len(documents), width)
        coarse = self.coarse_scores(emb.view(*grid, -1), top_scores.view(grid))  # [G, w, w]; padding -inf
        if not config.overlapping_antecedents:
            coarse = coarse.masked_fill(overlapping_pairs(top_starts.view(grid), top_ends.view(grid)), float("-inf"))
        antecedents, antecedent_mask, top_coarse = self.top_antecedents(coarse)  # [G, w, c], in each document
        in_group = antecedents + (torch.arange(len(documents), device=device) * width).view(-1, 1, 1)  # [G, w, c]
        in_group, mask, top_coarse = (tensor.flatten(0, 1) for tensor in (in_group, antecedent_mask, top_coarse))
        # each document's own column count, min(max_top_antecedents, its k), as forward's (distance pruning repeats
        # the first span in a short document's last columns: a column more would weigh it once more in refine)
        columns = torch.tensor([min(config.max_top_antecedents, count) for count in counts], device=device)
        within = torch.arange(mask.shape[1], device=device) < columns.repeat_interleave(width).unsqueeze(1)
        mask, top_coarse = mask & within, top_coarse.masked_fill(~within, float("-inf"))  # [G * w, c]
        features = None
        if config.fine_grained:
            genres = torch.tensor([document.genre for document in documents], device=device)
            features = self.pair_features(
                in_group,
                top_starts,
                torch.cat([document.speaker_ids for document in documents]),
                torch.cat([document.segment_of_token for document in documents]),
                genres.repeat_interleave(width),
            )  # [G * w, c, features]
        scored = mask if config.min_coarse_score is None else top_coarse > config.min_coarse_score  # not the padding
        antecedent_scores, emb = self.antecedent_scores(emb, in_group, top_coarse, features, scored)  # [G * w, c + 1]
        outputs = []
        for index, (count, offset) in enumerate(zip(counts, token_offsets, strict=True)):
            first, last = candidate_bounds[index], candidate_bounds[index + 1]
            own = slice(index * width, index * width + count)
            c = min(config.max_top_antecedents, count)  # as forward's: the first c of the group's columns
            outputs.append(
                CorefOutput(
                    candidate_starts=spans[index][0],
                    candidate_ends=spans[index][1],
                    candidate_mention_scores=mention_scores[first:last],
                    top_span_starts=top_starts[own] - offset,
                    top_span_ends=top_ends[own] - offset,
                    top_span_mention_scores=top_scores[own],
                    top_span_emb=emb[own],
                    top_antecedents=antecedents[index, :count, :c],
                    top_antecedent_mask=antecedent_mask[index, :count, :c],
                    top_antecedent_scores=antecedent_scores[own, : c + 1],
                )
            )
        return outputs

    # ------------------------------------------------------------- training
    def training_losses(self, document: DocumentTensors) -> Iterator[torch.Tensor]:
        """The document's training loss (one: the whole crop is one graph)."""
        yield self(document).loss

    def loss(self, output: CorefOutput, document: DocumentTensors) -> torch.Tensor:
        """Marginal log-likelihood of the gold antecedents among the kept ones (dummy gold if none)."""
        span_ids = span_cluster_ids(
            output.top_span_starts,
            output.top_span_ends,
            document.gold_starts,
            document.gold_ends,
            document.gold_cluster_ids,
        )  # [k]
        loss = antecedent_loss(
            output.top_antecedent_scores, output.top_antecedents, output.top_antecedent_mask, span_ids
        )
        if self.config.mention_loss_coef:
            loss = loss + self.config.mention_loss_coef * mention_loss(output, document, self.config.mention_loss_spans)
        return loss


def mention_loss(output: CorefOutput, document: DocumentTensors, spans: str = "candidates") -> torch.Tensor:
    """Summed binary cross-entropy of each candidate's (``spans``: candidates) or kept span's (top) mention score
    against being a gold mention (fp32)."""
    if spans == "top":
        starts, ends, scores = output.top_span_starts, output.top_span_ends, output.top_span_mention_scores
    else:
        starts, ends, scores = output.candidate_starts, output.candidate_ends, output.candidate_mention_scores
    return gold_mention_loss(starts, ends, scores, document.gold_starts, document.gold_ends)


def antecedent_loss(
    antecedent_scores: torch.Tensor, antecedents: torch.Tensor, antecedent_mask: torch.Tensor, span_ids: torch.Tensor
) -> torch.Tensor:
    """Sum over spans of -log sum_{gold antecedents} P(antecedent); the dummy is gold when none is.

    ``antecedent_scores`` is ``[k, c + 1]`` with the dummy in column 0.
    """
    antecedent_ids = span_ids[antecedents].masked_fill(~antecedent_mask, -1)  # [k, c]
    pair_gold = (antecedent_ids == span_ids.unsqueeze(1)) & (span_ids.unsqueeze(1) > 0)  # [k, c]
    dummy_gold = ~pair_gold.any(dim=1, keepdim=True)  # [k, 1]
    gold = torch.cat([dummy_gold, pair_gold], dim=1)  # [k, c + 1]
    gold_scores = antecedent_scores.masked_fill(~gold, float("-inf"))
    return (torch.logsumexp(antecedent_scores, dim=1) - torch.logsumexp(gold_scores, dim=1)).sum()


def predicted_clusters(
    starts: torch.Tensor,
    ends: torch.Tensor,
    antecedents: torch.Tensor,
    antecedent_scores: torch.Tensor,
    overlapping: bool = True,
) -> list[list[tuple[int, int]]]:
    """Argmax over [dummy, antecedents], clusters by following the links (as the original).

    ``overlapping`` False (``overlapping_antecedents: false``): each span takes the best antecedent that beats the
    dummy and whose cluster holds no mention overlapping the span, so that no cluster holds two overlapping
    mentions (as the incremental model's entities); the same clusters where no such conflict arises.
    """
    if not overlapping:
        return _clusters_without_overlaps(starts, ends, antecedents, antecedent_scores)
    best = antecedent_scores.argmax(dim=1) - 1  # [k]; -1 = dummy
    # One read: each span's start, end, choice and antecedents.
    rows = torch.cat([starts.unsqueeze(1), ends.unsqueeze(1), best.unsqueeze(1), antecedents], dim=1).tolist()
    starts_list, ends_list = [row[0] for row in rows], [row[1] for row in rows]
    cluster_of: dict[tuple[int, int], int] = {}
    clusters: list[list[tuple[int, int]]] = []
    for index, row in enumerate(rows):
        choice = row[2]
        if choice < 0:
            continue
        antecedent_index = row[3 + choice]
        antecedent = (starts_list[antecedent_index], ends_list[antecedent_index])
        if antecedent not in cluster_of:
            cluster_of[antecedent] = len(clusters)
            clusters.append([antecedent])
        mention = (starts_list[index], ends_list[index])
        cluster_of[mention] = cluster_of[antecedent]
        clusters[cluster_of[antecedent]].append(mention)
    return clusters


def _clusters_without_overlaps(
    starts: torch.Tensor, ends: torch.Tensor, antecedents: torch.Tensor, antecedent_scores: torch.Tensor
) -> list[list[tuple[int, int]]]:
    """``predicted_clusters`` with no two overlapping mentions in a cluster. Spans come in (start, end) order, so
    every mention of a cluster formed so far starts at or before the span: one overlaps it where its end reaches
    the span's start (``reach``: a cluster's largest end)."""
    rows = torch.cat([starts.unsqueeze(1), ends.unsqueeze(1), antecedents], dim=1).tolist()  # [k, 2 + c]
    scores = antecedent_scores.float().tolist()  # [k, c + 1], the dummy first
    spans = [(row[0], row[1]) for row in rows]
    cluster_of: dict[tuple[int, int], int] = {}
    clusters: list[list[tuple[int, int]]] = []
    reach: list[int] = []
    for index, row in enumerate(rows):
        mention, dummy = spans[index], scores[index][0]
        # columns by score, the lower column first among equals (argmax's choice); the dummy wins ties
        for column in sorted(range(len(row) - 2), key=lambda c, r=scores[index]: -r[c + 1]):
            if not scores[index][column + 1] > dummy:
                break
            antecedent = spans[row[2 + column]]
            cluster = cluster_of.get(antecedent)
            if (antecedent[1] if cluster is None else reach[cluster]) >= mention[0]:
                continue  # the antecedent's cluster holds a mention overlapping this span
            if cluster is None:
                cluster = cluster_of[antecedent] = len(clusters)
                clusters.append([antecedent])
                reach.append(antecedent[1])
            cluster_of[mention] = cluster
            clusters[cluster].append(mention)
            reach[cluster] = max(reach[cluster], mention[1])
            break
    return clusters
