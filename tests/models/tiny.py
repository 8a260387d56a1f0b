"""A tiny random BERT and documents built in memory, for fast model tests."""

from __future__ import annotations

import random
from pathlib import Path

import torch
from transformers import BertConfig

from coref_pipeline.models.baseline import BaselineCorefModel
from coref_pipeline.models.config import BaselineConfig, IncrementalConfig
from coref_pipeline.models.document import tensorize
from coref_pipeline.models.encoder import SegmentEncoder
from coref_pipeline.models.incremental import IncrementalCorefModel
from coref_pipeline.serving.coref_model import CorefModel

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(60)]


class TinyTokenizer:
    """Maps the tiny vocabulary's tokens to ids (all ``tensorize`` needs)."""

    def __init__(self) -> None:
        self.vocab = {token: index for index, token in enumerate(VOCAB)}

    def convert_tokens_to_ids(self, tokens):
        return [self.vocab.get(token, 1) for token in tokens]


def tiny_encoder(seed: int = 0, hidden: int = 32, dropout: float = 0.1) -> SegmentEncoder:
    torch.manual_seed(seed)
    config = BertConfig(
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        vocab_size=len(VOCAB),
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=64,
    )
    return SegmentEncoder.from_config(config)


def tiny_config(**overrides) -> BaselineConfig:
    values = dict(
        max_segment_len=16,
        max_training_sentences=3,
        max_span_width=5,
        feature_size=8,
        ffnn_size=24,
        max_top_antecedents=6,
        coref_depth=2,
        dropout_rate=0.0,
    )
    values.update(overrides)
    return BaselineConfig(**values)


def make_document(doc_key: str = "nw/tiny_0", seed: int = 0, num_segments: int = 2, seg_len: int = 16) -> dict:
    """A jsonlines document: random words in sentences of 3-6 words, a few clusters of repeated words."""
    rng = random.Random(seed)
    sentences, speakers, sentence_map, subtoken_map = [], [], [], []
    word, sentence = 0, 0
    for _ in range(num_segments):
        body, body_sent, body_word = [], [], []
        while len(body) < seg_len - 2 - 6:
            length = rng.randint(3, 6)
            for _ in range(length):
                # w0-w4 are "names" (mentions, coreferent when equal); w10-w59 filler.
                body.append(f"w{rng.randrange(5)}" if rng.random() < 0.4 else f"w{rng.randrange(10, 60)}")
                body_sent.append(sentence)
                body_word.append(word)
                word += 1
            sentence += 1
        sentences.append(["[CLS]", *body, "[SEP]"])
        speakers.append(["[SPL]"] + [f"spk{body_sent[i] % 2}" for i in range(len(body))] + ["[SPL]"])
        previous = subtoken_map[-1] if subtoken_map else 0
        subtoken_map += [previous, *body_word, body_word[-1]]
        sentence_map += [body_sent[0], *body_sent, body_sent[-1] + 1]
    flat = [token for segment in sentences for token in segment]
    positions = [i for i, token in enumerate(flat) if token not in ("[CLS]", "[SEP]")]
    # Clusters: one-token mentions of the same name (a learnable signal).
    by_token: dict[str, list[list[int]]] = {}
    for position in positions:
        if int(flat[position][1:]) < 5:
            by_token.setdefault(flat[position], []).append([position, position])
    clusters = [spans for spans in by_token.values() if len(spans) >= 2]
    return {
        "doc_key": doc_key,
        "sentences": sentences,
        "speakers": speakers,
        "clusters": clusters,
        "sentence_map": sentence_map,
        "subtoken_map": subtoken_map,
    }


def tiny_tensors(document: dict, config: BaselineConfig):
    return tensorize(document, TinyTokenizer(), config.max_segment_len, config.genres, config.default_genre, 20)


def tiny_hf_tokenizer():
    """A real fast tokenizer over the tiny vocabulary (saves and loads like any HF tokenizer)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordPiece(vocab={t: i for i, t in enumerate(VOCAB)}, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=False)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        mask_token="[MASK]",
    )


def save_tiny_models(directory: Path, max_segment_len: int = 32, threshold: float = 0.0) -> tuple[Path, Path]:
    """A tiny random baseline and incremental model, saved as model directories."""
    config = tiny_config(max_segment_len=max_segment_len)
    baseline_dir, incremental_dir = directory / "baseline", directory / "incremental"
    CorefModel("baseline", BaselineCorefModel(config, tiny_encoder(seed=3)), tiny_hf_tokenizer()).save(baseline_dir)
    incremental = IncrementalConfig.from_baseline(config, {"dropout_rate": 0.0, "threshold": threshold})
    CorefModel("incremental", IncrementalCorefModel(incremental, tiny_encoder(seed=4)), tiny_hf_tokenizer()).save(
        incremental_dir
    )
    return baseline_dir, incremental_dir


def conll_key(
    documents: list[dict], clusters: dict[str, list[list[tuple[int, int]]]] | None = None, path: str = "dev.gold_conll"
):
    """A gold CoNLL-2012 file of jsonlines documents (one word per non-special subtoken run, as ``subtoken_map`` says).

    ``clusters`` (word spans by doc_key) replaces a document's own clusters, e.g. with
    two clusters sharing a mention, as a corpus may annotate and ``minimize.py`` merges.
    """
    from coref_pipeline.evaluation.predictions import word_clusters
    from coref_pipeline.formats.conll import ConllFile

    lines = []
    for document in documents:
        doc_key = document["doc_key"]
        name, part = doc_key.rsplit("_", 1)
        flat = [token for segment in document["sentences"] for token in segment]
        words: dict[int, tuple[str, int]] = {}  # word -> (text, sentence)
        for position, token in enumerate(flat):
            if token not in ("[CLS]", "[SEP]"):
                words.setdefault(document["subtoken_map"][position], (token, document["sentence_map"][position]))
        opens: dict[int, list[str]] = {}
        for cluster_id, cluster in enumerate((clusters or {}).get(doc_key) or word_clusters(document, "clusters")):
            for start, end in cluster:
                if start == end:
                    opens.setdefault(start, []).append(f"({cluster_id})")
                else:
                    opens.setdefault(start, []).append(f"({cluster_id}")
                    opens.setdefault(end, []).append(f"{cluster_id})")
        lines.append(f"#begin document ({name}); part {int(part):03d}")
        previous_sentence, index_in_sentence = None, 0
        for word in sorted(words):
            text, sentence = words[word]
            if previous_sentence is not None and sentence != previous_sentence:
                lines.append("")
                index_in_sentence = 0
            previous_sentence = sentence
            coref = "|".join(opens.get(word, [])) or "-"
            lines.append(f"{name}\t{int(part)}\t{index_in_sentence}\t{text}\tNN\t*\t-\t-\t-\t-\t*\t{coref}")
            index_in_sentence += 1
        lines += ["", "#end document"]
    return ConllFile(path, "\n".join(lines) + "\n")
