"""The original model's forward pass in numpy, from a checkpoint's raw arrays (TF layouts, TF names).

Written from the equations of Joshi et al.'s code, not from this project's modules, so that a
test comparing the two catches a weight mapped to the wrong place or left untransposed:
``bert/modeling.py`` (embeddings, self-attention with the -10000 mask adder, erf GELU, layer norm
with epsilon 1e-12, pooler), ``util.ffnn`` / ``util.projection`` (``x @ W + b`` with ``W`` stored
``[in, out]``), and ``independent.py``: span embeddings [start; end; width; head], mention scores
with the width prior, ``extract_spans``'s pruning, the coarse scores (both mention scores, the
bilinear ``src_projection(g_i) . g_j`` and the distance prior over ``bucket_distance``), the
fine FFNN over [g_i; g_j; g_i * g_j; same speaker; genre; distance bucket; segment distance]
and the higher-order gate ``f``. Evaluation mode: no dropout. Computed in float64.

Candidate spans are enumerated from the sentence map alone, as ``independent.py`` does: where
``minimize.py``'s map runs a sentence's id onto ``[CLS]`` or ``[SEP]``, spans cover them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import erf

Params = dict[str, np.ndarray]


def ffnn(inputs: np.ndarray, params: Params, scope: str, num_hidden_layers: int) -> np.ndarray:
    """``util.ffnn`` at evaluation: ReLU hidden layers ``x @ hidden_weights_i + hidden_bias_i``, then the output."""
    prefix = f"{scope}/" if scope else ""
    current = inputs
    for index in range(num_hidden_layers):
        current = np.maximum(
            current @ params[f"{prefix}hidden_weights_{index}"] + params[f"{prefix}hidden_bias_{index}"], 0
        )
    return current @ params[f"{prefix}output_weights"] + params[f"{prefix}output_bias"]


def projection(inputs: np.ndarray, params: Params, scope: str) -> np.ndarray:
    """``util.projection``: an FFNN without hidden layers."""
    return ffnn(inputs, params, scope, 0)


def layer_norm(inputs: np.ndarray, params: Params, scope: str) -> np.ndarray:
    mean = inputs.mean(axis=-1, keepdims=True)
    variance = ((inputs - mean) ** 2).mean(axis=-1, keepdims=True)
    normalised = (inputs - mean) / np.sqrt(variance + 1e-12)
    return normalised * params[f"{scope}/LayerNorm/gamma"] + params[f"{scope}/LayerNorm/beta"]


def dense(inputs: np.ndarray, params: Params, scope: str) -> np.ndarray:
    """``tf.layers.dense``: ``x @ kernel + bias`` (kernel ``[in, out]``)."""
    return inputs @ params[f"{scope}/kernel"] + params[f"{scope}/bias"]


def bert(input_ids: np.ndarray, input_mask: np.ndarray, params: Params, config: dict) -> tuple[np.ndarray, np.ndarray]:
    """``BertModel``'s sequence output ``[segments, length, hidden]`` and pooled output ``[segments, hidden]``."""
    segments, length = input_ids.shape
    heads = config["num_attention_heads"]
    head_size = config["hidden_size"] // heads
    embeddings = (
        params["bert/embeddings/word_embeddings"][input_ids]
        + params["bert/embeddings/token_type_embeddings"][np.zeros_like(input_ids)]
        + params["bert/embeddings/position_embeddings"][:length][None]
    )
    hidden = layer_norm(embeddings, params, "bert/embeddings")
    adder = (1.0 - input_mask[:, None, None, :].astype(np.float64)) * -10000.0  # [segments, 1, 1, length]
    for index in range(config["num_hidden_layers"]):
        layer = f"bert/encoder/layer_{index}"

        def split_heads(x: np.ndarray) -> np.ndarray:  # [segments, heads, length, head_size]
            return x.reshape(segments, length, heads, head_size).transpose(0, 2, 1, 3)

        query = split_heads(dense(hidden, params, f"{layer}/attention/self/query"))
        key = split_heads(dense(hidden, params, f"{layer}/attention/self/key"))
        value = split_heads(dense(hidden, params, f"{layer}/attention/self/value"))
        scores = query @ key.transpose(0, 1, 3, 2) / math.sqrt(head_size) + adder
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probabilities = scores / scores.sum(axis=-1, keepdims=True)
        context = (probabilities @ value).transpose(0, 2, 1, 3).reshape(segments, length, heads * head_size)
        attention = layer_norm(
            dense(context, params, f"{layer}/attention/output/dense") + hidden, params, f"{layer}/attention/output"
        )
        intermediate = dense(attention, params, f"{layer}/intermediate/dense")
        intermediate = intermediate * 0.5 * (1.0 + erf(intermediate / math.sqrt(2.0)))  # bert/modeling.py's gelu
        hidden = layer_norm(dense(intermediate, params, f"{layer}/output/dense") + attention, params, f"{layer}/output")
    pooled = np.tanh(dense(hidden[:, 0], params, "bert/pooler/dense"))
    return hidden, pooled


def bucket_distance(distances: np.ndarray) -> np.ndarray:
    """``independent.py``'s buckets [0, 1, 2, 3, 4, 5-7, 8-15, 16-31, 32-63, 64+]."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logspace = np.floor(np.log(distances.astype(np.float64)) / math.log(2))
    logspace = np.nan_to_num(logspace, nan=0.0, neginf=0.0).astype(np.int64) + 3
    combined = np.where(distances <= 4, distances, logspace)
    return np.clip(combined, 0, 9)


def extract_spans(scores: np.ndarray, starts: np.ndarray, ends: np.ndarray, k: int) -> list[int]:
    """``coref_kernels.cc``'s ExtractSpans: by descending score, skipping spans that cross a kept one, then by
    (start, end)."""
    kept: list[int] = []
    for index in sorted(range(len(scores)), key=lambda i: -scores[i]):
        start, end = starts[index], ends[index]
        crossing = any(
            (s < start <= e < end) or (start < s <= end < e) for s, e in ((starts[j], ends[j]) for j in kept)
        )
        if not crossing:
            kept.append(index)
        if len(kept) == k:
            break
    return sorted(kept, key=lambda i: (starts[i], ends[i]))


@dataclass
class OriginalOutput:
    candidate_scores: dict[tuple[int, int], float]  # (start, end) -> mention score
    top_spans: list[tuple[int, int]]  # the kept spans, by (start, end)
    antecedent_scores: list[dict[int, float]]  # per kept span: antecedent's index among the kept spans -> score
    pooled: np.ndarray  # [segments, hidden]: BERT's pooler (unused by the model; it checks that layer's weights)


def original_forward(
    document: dict, vocabulary: dict[str, int], params: Params, bert_config: dict, conf: dict
) -> OriginalOutput:
    """The original's scores of a Joshi-format document (``conf``: the experiment's keys)."""
    params = {name: value.astype(np.float64) for name, value in params.items()}
    segments = document["sentences"]
    length = max(len(segment) for segment in segments)
    input_ids = np.zeros((len(segments), length), dtype=np.int64)
    input_mask = np.zeros((len(segments), length), dtype=np.int64)
    for row, segment in enumerate(segments):
        input_ids[row, : len(segment)] = [vocabulary.get(token, vocabulary["[UNK]"]) for token in segment]
        input_mask[row, : len(segment)] = 1
    sequence, pooled = bert(input_ids, input_mask, params, bert_config)
    mention_doc = sequence[input_mask.astype(bool)]  # [n, hidden]: flatten_emb_by_sentence
    num_words = mention_doc.shape[0]
    word_segments = np.repeat(np.arange(len(segments)), [len(segment) for segment in segments])
    sentence_map = np.asarray(document["sentence_map"])

    # Candidates: width <= max_span_width inside one sentence (of the sentence map, [CLS]/[SEP] included).
    width = conf["max_span_width"]
    starts, ends = [], []
    for start in range(num_words):
        for offset in range(width):
            end = start + offset
            if end < num_words and sentence_map[start] == sentence_map[end]:
                starts.append(start)
                ends.append(end)
    starts, ends = np.array(starts), np.array(ends)

    # get_span_emb: [start; end; width embedding (end - start); attention-weighted head]
    word_attn = projection(mention_doc, params, "mention_word_attn")[:, 0]  # [n]
    heads = []
    for start, end in zip(starts, ends, strict=True):
        logits = word_attn[start : end + 1]
        weights = np.exp(logits - logits.max())
        heads.append((weights / weights.sum()) @ mention_doc[start : end + 1])
    span_emb = np.concatenate(
        [mention_doc[starts], mention_doc[ends], params["span_width_embeddings"][ends - starts], np.array(heads)],
        axis=1,
    )
    # get_mention_scores: the mention FFNN plus the width prior's FFNN over span_width_prior_embeddings
    depth = conf["ffnn_depth"]
    width_scores = ffnn(params["span_width_prior_embeddings"], params, "width_scores", depth)[:, 0]  # [W]
    mention_scores = ffnn(span_emb, params, "mention_scores", depth)[:, 0] + width_scores[ends - starts]

    k = min(3900, int(math.floor(num_words * conf["top_span_ratio"])))
    c = min(conf["max_top_antecedents"], k)
    top = extract_spans(mention_scores, starts, ends, k)
    top_starts, top_ends, top_emb, top_scores = starts[top], ends[top], span_emb[top], mention_scores[top]
    k = len(top)

    # coarse_to_fine_pruning
    offsets = np.arange(k)[:, None] - np.arange(k)[None, :]  # [k, k]
    with np.errstate(divide="ignore"):
        fast = top_scores[:, None] + top_scores[None, :] + np.log((offsets >= 1).astype(np.float64))
    fast = fast + projection(top_emb, params, "src_projection") @ top_emb.T
    distance_scores = projection(params["antecedent_distance_emb"], params, "")[:, 0]  # [10]
    fast = fast + distance_scores[bucket_distance(offsets)]
    top_antecedents = np.argsort(-fast, axis=1, kind="stable")[:, :c]  # [k, c]
    top_mask = np.take_along_axis(offsets >= 1, top_antecedents, axis=1)
    top_fast = np.take_along_axis(fast, top_antecedents, axis=1)
    top_offsets = np.take_along_axis(offsets, top_antecedents, axis=1)

    # The features of get_slow_antecedent_scores
    speaker_ids = speaker_id_sequence(document, conf["max_num_speakers"])
    top_speakers = speaker_ids[top_starts]
    same_speaker = (top_speakers[:, None] == top_speakers[top_antecedents]).astype(np.int64)
    genres = {genre: index for index, genre in enumerate(conf["genres"])}
    genre = genres.get(document["doc_key"][:2], 0)
    segment_distance = np.clip(
        word_segments[top_starts][:, None] - word_segments[top_starts[top_antecedents]],
        0,
        conf["max_training_sentences"] - 1,
    )
    feature_size = params["genre_embeddings"].shape[1]
    features = np.concatenate(
        [
            params["coref_layer/same_speaker_emb"][same_speaker],
            np.broadcast_to(params["genre_embeddings"][genre], (k, c, feature_size)),
            params["coref_layer/antecedent_distance_emb"][bucket_distance(top_offsets)],
            params["coref_layer/segment_distance/segment_distance_embeddings"][segment_distance],
        ],
        axis=2,
    )
    for _ in range(conf["coref_depth"]):
        antecedent_emb = top_emb[top_antecedents]  # [k, c, emb]
        target = np.broadcast_to(top_emb[:, None], antecedent_emb.shape)
        pair = np.concatenate([target, antecedent_emb, antecedent_emb * target, features], axis=2)
        slow = ffnn(pair, params, "coref_layer/slow_antecedent_scores", depth)[:, :, 0]
        scores = top_fast + slow  # [k, c]
        with_dummy = np.concatenate([np.zeros((k, 1)), scores], axis=1)
        weights = np.exp(with_dummy - with_dummy.max(axis=1, keepdims=True))
        weights = weights / weights.sum(axis=1, keepdims=True)
        candidates = np.concatenate([top_emb[:, None], antecedent_emb], axis=1)  # [k, c + 1, emb]
        attended = (weights[:, :, None] * candidates).sum(axis=1)
        gate = 1.0 / (1.0 + np.exp(-projection(np.concatenate([top_emb, attended], axis=1), params, "coref_layer/f")))
        top_emb = gate * attended + (1 - gate) * top_emb
    antecedent_scores = [
        {int(top_antecedents[i, j]): float(scores[i, j]) for j in range(c) if top_mask[i, j]} for i in range(k)
    ]
    return OriginalOutput(
        candidate_scores={(int(s), int(e)): float(v) for s, e, v in zip(starts, ends, mention_scores, strict=True)},
        top_spans=[(int(s), int(e)) for s, e in zip(top_starts, top_ends, strict=True)],
        antecedent_scores=antecedent_scores,
        pooled=pooled,
    )


def speaker_id_sequence(document: dict, max_num_speakers: int) -> np.ndarray:
    """``tensorize_example``'s speaker ids: UNK 0, [SPL] 1, then each new speaker while fewer than the cap, else 3."""
    speakers = [speaker for segment in document["speakers"] for speaker in segment]
    ids = {"UNK": 0, "[SPL]": 1}
    for speaker in speakers:
        if speaker not in ids and len(ids) < max_num_speakers:
            ids[speaker] = len(ids)
    return np.array([ids.get(speaker, 3) for speaker in speakers])
