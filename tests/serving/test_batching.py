"""Many documents at once: grouped by length, their segments read by the encoder together, the same clusters as one
document at a time, in bounded memory (``serving/batching.py``, ``CorefModel.predict_documents``/``predict_many``)."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from coref_pipeline.serving.batching import (
    CPU_MAX_TOKENS_IN_BATCH,
    HEAD_LENGTH_RATIO,
    MAX_TOKENS_IN_BATCH,
    default_batch_tokens,
    head_runs,
    length_groups,
    pools,
)
from coref_pipeline.serving.coref_model import CorefModel, DocumentTooLongError
from tests.models.tiny import save_tiny_models
from tests.serving.encoder_passes import (
    assert_same_where_read_the_same,
    batched_as_one_at_a_time,
    counted_encoder_passes,
    encoder_terms,
)

WORDS = [f"w{i}" for i in range(50)] + ["He", "She", "it", "the", "letter", "Ada", "Charles"]


def text_of(seed: int, sentences: int) -> str:
    rng = random.Random(seed)
    return " ".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) + "." for _ in range(sentences))


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, CorefModel]:
    # A low threshold: the incremental model links many spans, so its decisions show any difference.
    baseline_dir, incremental_dir = save_tiny_models(tmp_path_factory.mktemp("models"), threshold=-2.0)
    return {"baseline": CorefModel.load(baseline_dir), "incremental": CorefModel.load(incremental_dir)}


@pytest.fixture(scope="module")
def documents(models) -> list[dict]:
    """Jsonlines documents of 1 to 12 segments of 32 subtokens, in no order of length."""
    model = models["baseline"]
    from coref_pipeline.serving.coref_model import as_split_text

    lengths = [3, 40, 1, 12, 25, 7, 60, 2, 18, 33]  # sentences
    return [
        model.jsonlines_document(as_split_text(text_of(seed, length)), None, "nw", f"doc{seed}")
        for seed, length in enumerate(lengths)
    ]


@pytest.mark.parametrize("counts", [[5, 1, 9, 3, 3], [100, 1, 1], [], [7] * 10])
@pytest.mark.parametrize("budget", [1, 8, 10, 1000])
def test_length_groups_hold_every_document_once_longest_first_within_the_budget(counts, budget):
    groups = length_groups(counts, budget)
    assert sorted(index for group in groups for index in group) == list(range(len(counts)))
    flat = [counts[index] for group in groups for index in group]
    assert flat == sorted(counts, reverse=True)  # longest first
    for group in groups:
        assert len(group) == 1 or sum(counts[index] for index in group) <= budget  # over the budget: alone


def test_length_groups_refuse_a_budget_below_one():
    with pytest.raises(ValueError, match="max_tokens_in_batch must be at least 1"):
        length_groups([3], 0)


@pytest.mark.parametrize("counts", [[40, 38, 30, 21, 20, 19, 10, 9], [4000] + [40] * 100, [7], []])
def test_head_runs_keep_a_groups_order_and_each_runs_lengths_within_the_ratio(counts):
    runs = head_runs(counts)
    assert [position for run in runs for position in run] == list(range(len(counts)))
    for run in runs:
        assert counts[run[0]] <= HEAD_LENGTH_RATIO * counts[run[-1]]
    for before, after in itertools.pairwise(runs):  # a run ends only where the next document would break the ratio
        assert counts[before[0]] > HEAD_LENGTH_RATIO * counts[after[0]]
    if len(counts) == 101:
        assert runs == [[0], list(range(1, 101))]  # the long document's head alone, not squared for each short one


def test_pools_read_an_iterator_lazily_in_bounded_pools():
    read = []

    def items():
        for number in range(100):
            read.append(number)
            yield number

    stream = pools(items(), lambda item: 10, max_tokens=25)  # 4 budgets of 25: pools of 10 items
    first = next(stream)
    assert first == list(range(10)) and len(read) == 10  # no more read than the pool holds
    assert [len(pool) for pool in stream] == [10] * 9


@pytest.mark.parametrize("model_type", ["baseline", "incremental"])
@pytest.mark.parametrize("budget", [32, 100, 4096])
def test_batched_prediction_gives_the_clusters_of_one_document_at_a_time(models, documents, model_type, budget):
    """Budgets below one document (a document alone, its segments in passes within it), of a few documents, and
    of all of them."""
    model = models[model_type]
    one = model.predict_documents(documents, progress=False, max_tokens_in_batch=0)
    batched, read_the_same = batched_as_one_at_a_time(
        model, lambda: model.predict_documents(iter(documents), progress=False, max_tokens_in_batch=budget)
    )
    assert [d["doc_key"] for d in batched] == [d["doc_key"] for d in documents]  # their order, from an iterator
    assert_same_where_read_the_same(
        [d["predicted_clusters"] for d in batched], [d["predicted_clusters"] for d in one], read_the_same
    )


@pytest.mark.parametrize("model_type", ["baseline", "incremental"])
def test_the_encoder_reads_several_documents_in_one_pass(models, documents, model_type, monkeypatch):
    model = models[model_type]
    calls = counted_encoder_passes(model, monkeypatch)
    model.predict_documents(documents, progress=False, max_tokens_in_batch=4096)
    segments = sum(len(document["sentences"]) for document in documents)
    assert sum(calls) == segments and len(calls) < len(documents)  # one call for several documents' segments


@pytest.mark.parametrize("model_type", ["baseline", "incremental"])
def test_a_document_over_the_budget_is_predicted_as_one_at_a_time(models, documents, model_type, monkeypatch):
    """Never in a group's passes: the incremental model reads it segment by segment (constant memory, never encoded
    whole), the baseline encodes it in its own passes, as one document at a time does."""
    model = models[model_type]
    together = []
    original = CorefModel.encode_together

    def spy(self, group, max_tokens):
        together.append(sum(document.num_tokens for document in group))
        return original(self, group, max_tokens)

    monkeypatch.setattr(CorefModel, "encode_together", spy)
    budget = 100
    longest = max(sum(len(segment) for segment in document["sentences"]) for document in documents)
    assert longest > budget
    model.predict_documents(documents, progress=False, max_tokens_in_batch=budget)
    assert together and max(together) <= budget


def test_predict_many_and_predict_texts_batched_match_one_at_a_time(models):
    model = models["incremental"]
    items = [text_of(seed, n) for seed, n in enumerate([4, 30, 1, 12])]
    items.insert(2, "   ")  # an empty document, in its place
    items.append({"text": text_of(9, 5), "doc_key": "mine", "speakers": "bob"})
    one = list(model.predict_many(items, progress=False, max_tokens_in_batch=0))
    batched, read_the_same = batched_as_one_at_a_time(
        model, lambda: list(model.predict_many(iter(items), progress=False, max_tokens_in_batch=64))
    )
    assert [(r.doc_key, r.words) for r in batched] == [(r.doc_key, r.words) for r in one]
    assert [r.doc_key for r in one] == ["0", "1", "2", "3", "4", "mine"] and one[2].words == batched[2].clusters == []
    assert_same_where_read_the_same(  # the documents with words, those the encoder read
        [r.to_dict() for r in batched if r.words], [r.to_dict() for r in one if r.words], read_the_same
    )
    listed = model.predict(texts=items)  # the default budget's groups: the same computation as predict_many's
    expected = [r.to_dict() for r in model.predict_many(items, progress=False)]
    assert isinstance(listed, list) and [r.to_dict() for r in listed] == expected
    with pytest.raises(TypeError, match="one document or texts"):
        model.predict("A text.", texts=items)


def test_a_baseline_document_over_its_limit_is_refused_by_name_among_others(tmp_path, documents):
    baseline_dir, _ = save_tiny_models(tmp_path)
    limited = CorefModel.load(baseline_dir, max_inference_subtokens=200)
    too_long = next(d for d in documents if sum(len(s) for s in d["sentences"]) > 200)
    with pytest.raises(DocumentTooLongError, match=f"'{too_long['doc_key']}'"):
        limited.predict_documents(documents, progress=False, max_tokens_in_batch=MAX_TOKENS_IN_BATCH)


def test_batched_scores_are_the_one_at_a_time_scores_within_the_float_bound(models, documents):
    """The baseline's encoder outputs and antecedent scores from an encoder pass shared with other documents: the
    same kept spans and antecedents but where the scores that rank them lie within the float bound (then what reads
    them differs), the scores within the bound."""
    from tests.tolerances import (
        assert_reordered_close,
        head_terms,
        recorded_coarse_scores,
        same_baseline_decisions_or_near_tie,
    )

    model = models["baseline"]
    tensors = [model.tensorize(document) for document in documents[:4]]
    hidden = model.encode_together(tensors, 4096)
    config = model.model.encoder.model.config
    terms = encoder_terms(config, model.config.max_segment_len)
    compared = 0
    for document, encoded in zip(tensors, hidden, strict=True):
        with model._evaluation_mode():
            alone_hidden = model.model.encoder(document.input_ids, document.attention_mask, document.lengths())
        assert_reordered_close(encoded, alone_hidden, terms)
        with recorded_coarse_scores(model.model) as coarse:
            alone = model._forward_for_inference(document)
        together = model._forward_for_inference(document, encoded)
        chain, key = terms + head_terms(model.model), document.doc_key
        if not same_baseline_decisions_or_near_tie(
            together, alone, coarse[0], model.config.min_coarse_score, chain, key
        ):
            continue  # a near tie in the mention ranking or a span's antecedents tipped
        assert_reordered_close(together.top_antecedent_scores, alone.top_antecedent_scores, chain)
        compared += 1
    assert compared  # scores to see


# ------------------------------------------------------------------------------------ the shipped corpora
@pytest.fixture(scope="module")
def minilm_models() -> dict[str, CorefModel]:
    """Both models on the packaged MiniLM at the ``cpu_minilm`` sizes, their pair weights spread so that they
    link many mentions (untrained heads: the clusters are not good, but every decision shows in them)."""
    from coref_pipeline.models.config import BaselineConfig, IncrementalConfig
    from coref_pipeline.training import build_baseline, build_incremental
    from tests.models.test_incremental import spread_pair_weights

    config = BaselineConfig(
        encoder="embedded:minilm", ffnn_size=500, max_top_antecedents=25, coref_depth=1, word_boundary_spans=True
    )
    torch.manual_seed(3)
    baseline = build_baseline(config)
    with torch.no_grad():
        for parameter in baseline.model.pair_scorer.parameters():
            parameter.add_(torch.randn(parameter.shape) * 0.05)
    incremental = build_incremental(baseline, IncrementalConfig.from_baseline(config, {"threshold": -1.0}))
    spread_pair_weights(incremental.model, std=0.05, seed=1)
    return {"baseline": baseline, "incremental": incremental}


def corpus_test_documents(path, model: CorefModel) -> list[dict]:
    from coref_pipeline.formats.conll import ConllFile
    from coref_pipeline.formats.corpus import SegmentedCorpus, preprocess_corpus, segment_corpus

    frames = {"test": preprocess_corpus(ConllFile.read(path))}
    length = model.config.max_segment_len
    return SegmentedCorpus(*segment_corpus(frames, "embedded:minilm", [length])).documents("test", length)


@pytest.mark.slow
@pytest.mark.parametrize("corpus", ["sample", "litbank"])
@pytest.mark.parametrize("model_type", ["baseline", "incremental"])
def test_the_shipped_corpora_test_sets_batched_give_the_clusters_of_one_at_a_time(
    minilm_models, corpus, model_type, request
):
    """The sample corpus's and LitBank's test documents (whole, at the model's segment length), batched at the
    accelerators' default budget: each document's clusters those of one at a time, as far as float32 guarantees."""
    from tests.paths import PROJECT_ROOT

    if corpus == "litbank":
        path = request.getfixturevalue("litbank_dir") / "test.conll"
    else:
        path = PROJECT_ROOT / "data" / "01_raw" / "sample" / "test.english.v4_gold_conll"
    model = minilm_models[model_type]
    documents = corpus_test_documents(path, model)
    batched_as_one_at_a_time(
        model,
        lambda: model.predict_documents(documents, progress=False, max_tokens_in_batch=MAX_TOKENS_IN_BATCH),
        least_clusters=len(documents),
    )


def test_the_default_budget_is_the_devices_and_groups_short_documents_on_a_cpu(models, monkeypatch):
    assert default_batch_tokens("cuda") == default_batch_tokens("mps") == MAX_TOKENS_IN_BATCH
    assert 0 < default_batch_tokens("cpu") == CPU_MAX_TOKENS_IN_BATCH < MAX_TOKENS_IN_BATCH
    model = models["baseline"]
    assert model.device.type == "cpu"
    assert model.batch_tokens() == model.batch_tokens(None) == CPU_MAX_TOKENS_IN_BATCH
    assert model.batch_tokens(64) == 64 and model.batch_tokens(0) == 0
    texts = [text_of(seed, 2) for seed in range(12)]  # a segment each, far under the budget together
    one = [r.to_dict() for r in model.predict_many(texts, max_tokens_in_batch=0)]
    passes = counted_encoder_passes(model, monkeypatch)
    (grouped, passes_grouped), read_the_same = batched_as_one_at_a_time(
        model, lambda: (model.predict(texts=texts), len(passes))
    )
    assert passes_grouped < len(texts)  # several short documents a pass, unasked
    assert_same_where_read_the_same([r.to_dict() for r in grouped], one, read_the_same)
