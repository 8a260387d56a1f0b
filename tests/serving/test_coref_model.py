"""The user-facing API: CorefModel.load(DIR).predict(text | words | sentences) on tiny random models."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from coref_pipeline import CorefModel, CorefResult, DocumentTooLongError
from coref_pipeline.runtime.devices import held_memory_environment
from coref_pipeline.runtime.onednn import ONEDNN_CACHE_ENVIRONMENT
from tests.models.tiny import save_tiny_models
from tests.paths import PROJECT_ROOT
from tests.serving.encoder_passes import encoder_terms, recorded_encoder_outputs
from tests.tolerances import assert_reordered_close

ROOT = PROJECT_ROOT

UNICODE_TEXT = (
    "“Ada,” said   Charles — “your notes are longer than my paper!”\n"
    "She laughed… and   she kept writing; Charles didn’t mind.\n\n"
    "Zoë (née Müller) read them in 1843 -- «C’est magnifique», she wrote.\t\tHer letter survives.\r\n"
)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, CorefModel]:
    # A very low threshold: every span joins an entity, so the incremental model predicts many mentions.
    baseline_dir, incremental_dir = save_tiny_models(tmp_path_factory.mktemp("models"), threshold=-1e4)
    return {"baseline": CorefModel.load(baseline_dir), "incremental": CorefModel.load(incremental_dir)}


def check_result(result: CorefResult, text: str) -> None:
    assert result.text == text
    for word, (start, end) in zip(result.words, result.word_spans, strict=True):
        assert text[start:end] == word
    assert [word for sentence in result.sentences for word in sentence] == result.words
    assert len(result.clusters) == len(result.char_clusters) == len(result.mention_strings)
    for words, chars, strings in zip(result.clusters, result.char_clusters, result.mention_strings, strict=True):
        assert len(words) >= 2 and len(words) == len(chars) == len(strings)
        assert words == sorted(words)
        for (first, last), (start, end), string in zip(words, chars, strings, strict=True):
            assert text[start:end] == string
            assert start == result.word_spans[first][0] and end == result.word_spans[last][1]
            assert string.startswith(result.words[first]) and string.endswith(result.words[last])
    firsts = [cluster[0] for cluster in result.clusters]
    assert firsts == sorted(firsts)


@pytest.mark.parametrize("model_type", ["baseline", "incremental"])
def test_offsets_round_trip_on_unicode_spaces_and_newlines(models, model_type):
    result = models[model_type].predict(UNICODE_TEXT)
    check_result(result, UNICODE_TEXT)
    assert result.clusters, "the tiny model predicts no cluster, so nothing was checked"
    record = json.loads(json.dumps(result.to_dict()))
    assert record["char_clusters"] == [[list(span) for span in cluster] for cluster in result.char_clusters]
    assert [[UNICODE_TEXT[s:e] for s, e in cluster] for cluster in record["char_clusters"]] == record["mention_strings"]


def test_the_incremental_model_with_a_low_threshold_puts_every_kept_span_in_one_cluster(models):
    result = models["incremental"].predict(UNICODE_TEXT)
    assert len(result.clusters) == 1 and len(result.clusters[0]) > len(result.sentences)
    # Some mentions span the text's layout: a line break or several spaces inside them.
    assert any("\n" in string or "  " in string for string in result.mention_strings[0])


@pytest.mark.parametrize("blank", ["", "   ", "\n\n\t \r\n", [], [[]], [[], []]])
@pytest.mark.parametrize("model_type", ["baseline", "incremental"])
def test_empty_and_whitespace_only_input_gives_an_empty_result(models, model_type, blank):
    result = models[model_type].predict(blank)
    assert result.words == [] and result.sentences == [] and result.clusters == []
    assert result.char_clusters == [] and result.mention_strings == []


def test_words_and_sentences_input(models):
    model = models["incremental"]
    sentences = [["Ada", "wrote", "notes", "."], ["She", "published", "them", "."]]
    by_sentences = model.predict(sentences)
    assert by_sentences.text == "Ada wrote notes .\nShe published them ."
    assert by_sentences.sentences == sentences
    check_result(by_sentences, by_sentences.text)
    words = [word for sentence in sentences for word in sentence]
    by_words = model.predict(words)
    assert by_words.words == words and by_words.sentences == [words]
    check_result(by_words, by_words.text)
    with pytest.raises(TypeError, match="mixes words and sentences"):
        model.predict(["Ada", ["She"]])
    with pytest.raises(ValueError, match="sentence 1, word 0 is ''"):
        model.predict([["Ada"], ["", "x"]])


def test_speakers_and_genre(models):
    model = models["baseline"]
    sentences = [["Ada", "spoke", "."], ["Charles", "answered", "."]]
    per_sentence = model.predict(sentences, speakers=["ada", "charles"], doc_key="talk").document
    assert per_sentence["speakers"][0] == ["[SPL]", "ada", "ada", "ada", "charles", "charles", "charles", "[SPL]"]
    assert per_sentence["doc_key"] == "nw/talk"
    per_word = model.predict(sentences, speakers=[["a", "b", "c"], ["d", "e", "f"]], genre="bc").document
    assert per_word["speakers"][0][1:-1] == ["a", "b", "c", "d", "e", "f"] and per_word["doc_key"].startswith("bc/")
    default = model.predict(sentences).document
    assert set(default["speakers"][0][1:-1]) == {"-"}
    with pytest.raises(ValueError, match=r"speakers must be one string, one per sentence \(2 sentences\)"):
        model.predict(sentences, speakers=["only one", "two", "three"])
    with pytest.raises(ValueError, match=r"genre 'news' is not one of the model's \['bc', 'bn'"):
        model.predict("Text.", genre="news")


def test_predict_many_streams_records_in_order(models, capsys):
    model = models["incremental"]
    items = [
        "Ada wrote. She smiled.",
        {"sentences": [["Charles", "read", "."]], "doc_key": "mine", "speakers": "bob"},
        ["Just", "words"],
        {"text": "   "},
    ]
    results = model.predict_many(items)
    assert not isinstance(results, list)  # a generator: each result as soon as it is done
    results = list(results)
    assert [result.doc_key for result in results] == ["0", "mine", "2", "3"]
    assert results[1].words == ["Charles", "read", "."] and results[3].words == []
    assert "predict" in capsys.readouterr().err  # the progress bar
    with pytest.raises(ValueError, match=r"document 0: a record needs exactly one of 'text', 'sentences', 'words'"):
        list(model.predict_many([{"txt": "typo"}], progress=False))
    with pytest.raises(ValueError, match=r"document 0: unknown keys \['speaker'\]"):
        list(model.predict_many([{"text": "A.", "speaker": "x"}], progress=False))


def test_same_input_same_output_and_a_reloaded_model_agrees(models, tmp_path):
    model = models["incremental"]
    first = model.predict(UNICODE_TEXT)
    assert model.predict(UNICODE_TEXT).to_dict() == first.to_dict()
    model.save(tmp_path / "again")
    assert CorefModel.load(tmp_path / "again").predict(UNICODE_TEXT).to_dict() == first.to_dict()


def test_a_model_loaded_for_prediction_predicts_what_transformers_encoder_predicts(tmp_path):
    """``predict --precision 32`` writes what it wrote when transformers computed the encoder: a model loaded
    ``for_prediction`` (its BERT encoder from ``models/bert.py``) and the same model loaded as before (transformers'
    encoder) give the same result, both models. Ours runs the dense layers over the real tokens only, in products of
    other shapes, so its encoder's outputs are transformers' within the reordered sums' bound (on every CPU measured,
    the same bits); where they are the same bits, the same head gives the same bytes."""
    from coref_pipeline.models.bert import InferenceBert

    for directory in save_tiny_models(tmp_path, threshold=-1e4):
        ours, theirs = CorefModel.load(directory, for_prediction=True), CorefModel.load(directory)
        assert isinstance(ours.model.encoder.model, InferenceBert)
        assert not isinstance(theirs.model.encoder.model, InferenceBert)
        with recorded_encoder_outputs(ours) as ours_passes:
            result = ours.predict(UNICODE_TEXT).to_dict()
        with recorded_encoder_outputs(theirs) as their_passes:
            expected = theirs.predict(UNICODE_TEXT).to_dict()
        assert result["clusters"]  # something to compare
        terms = encoder_terms(theirs.model.encoder.model.config, theirs.config.max_segment_len)
        for found, computed in zip(ours_passes, their_passes, strict=True):
            assert_reordered_close(found, computed, terms)
        assert (result["sentences"], result["word_spans"]) == (expected["sentences"], expected["word_spans"])
        if all(torch.equal(found, computed) for found, computed in zip(ours_passes, their_passes, strict=True)):
            assert json.dumps(result) == json.dumps(expected)


def test_a_model_loaded_for_prediction_draws_no_initial_weights_and_imports_no_compiler(tmp_path):
    """The weights are copied into a model built on the meta device without drawing its initial values: drawing a
    meta embedding's (torch computes ``normal_`` there in Python behind a guard) imported ``torch._dynamo``, 1.1 s of
    a ``predict`` command on a 2-core CPU (``PYTHONPROFILEIMPORTTIME``). Loaded for prediction and predicting, both
    models import neither it nor transformers' model stack; a fresh process, so that no other test's imports count."""
    script = textwrap.dedent(
        """
        import sys
        from coref_pipeline import CorefModel
        for directory in sys.argv[1:]:
            CorefModel.load(directory, for_prediction=True).predict("Ada met Charles. He showed her his engine.")
        print(sorted(name for name in ("torch._dynamo", "transformers.modeling_utils") if name in sys.modules))
        """
    )
    directories = [str(directory) for directory in save_tiny_models(tmp_path)]
    found = subprocess.run([sys.executable, "-c", script, *directories], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]", found.stdout + found.stderr


def test_segmented_documents_are_predicted_without_transformers_pandas_or_sympy(tmp_path):
    """Loaded for prediction, both models read and predict jsonlines documents (``predict``'s usual input) without
    importing transformers, pandas or sympy: the encoder's configuration and the tokenizer's vocabulary are read from
    their files, and the model's memory is allocated without torch's Python reference of ``empty_like`` (0.7 s,
    0.2 s and 0.4 s of a ``predict`` command on a 2-core CPU, ``PYTHONPROFILEIMPORTTIME``); raw text too, its words
    split into subtokens by the tokenizer's file (1.0 s of its first prediction; as transformers' tokenizer splits
    them: tests/models/test_serialization.py). A fresh process, so that no other test's imports count; its clusters
    are those of the same model loaded for prediction here (the same computation; transformers' encoder is compared
    with it above)."""
    from tests.models.tiny import make_document

    script = textwrap.dedent(
        """
        import json, sys
        from coref_pipeline import CorefModel
        documents = [json.loads(line) for line in open(sys.argv[1])]
        models = [CorefModel.load(directory, for_prediction=True) for directory in sys.argv[2:-1]]
        for model in models:
            model.check_segmentation(documents, None, "documents.jsonlines")
            print(
                json.dumps(
                    [document["predicted_clusters"] for document in model.predict_documents(documents, progress=False)]
                )
            )
        print(sorted(name for name in ("transformers", "pandas", "sympy") if name in sys.modules))
        for model in models:
            print(json.dumps(model.predict(sys.argv[-1]).to_dict()))
        print("transformers" in sys.modules)
        """
    )
    documents = [make_document(f"nw/d{i}_0", seed=i, num_segments=2) for i in range(2)]
    (tmp_path / "documents.jsonlines").write_text("".join(json.dumps(document) + "\n" for document in documents))
    directories = [str(directory) for directory in save_tiny_models(tmp_path, threshold=-1e4)]
    text = UNICODE_TEXT + " " + " ".join(f"w{i % 50} w{(i + 7) % 50}." for i in range(80))  # over 128 words
    found = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "documents.jsonlines"), *directories, text],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = found.stdout.strip().splitlines()
    clusters, imported, texts, text_imports = lines[:2], lines[2], lines[3:5], lines[5]
    assert imported == "[]" and text_imports == "False", found.stdout + found.stderr
    for directory, predicted, predicted_text in zip(directories, clusters, texts, strict=True):
        expected = CorefModel.load(directory, for_prediction=True).predict_documents(documents, progress=False)
        assert json.loads(predicted) == [document["predicted_clusters"] for document in expected]
        assert json.loads(predicted_text) == CorefModel.load(directory, for_prediction=True).predict(text).to_dict()
    assert any(json.loads(predicted) != [[], []] for predicted in clusters)  # something was compared
    assert any(json.loads(predicted)["clusters"] for predicted in texts)


def test_the_baseline_length_limit_raises_the_documented_error(tmp_path):
    baseline_dir, _ = save_tiny_models(tmp_path)
    text = " ".join(f"w{i % 50} w{(i + 7) % 50} w{(i + 3) % 50}." for i in range(40))  # 160 words, 1 subtoken each
    assert len(CorefModel.load(baseline_dir).predict(text).words) == 160  # under the default limit
    limited = CorefModel.load(baseline_dir, max_inference_subtokens=100)
    with pytest.raises(DocumentTooLongError) as error:
        limited.predict(text, doc_key="long")
    message = str(error.value)
    assert "'nw/long'" in message and "max_inference_subtokens=100" in message
    assert "use the incremental model" in message and "--max-subtokens" in message
    assert len(limited.predict(text[:150]).words) < 100  # a shorter document still runs


def test_span_representations_for_each_predicted_mention(models):
    model = models["incremental"]
    result = model.predict(UNICODE_TEXT)
    embeddings, cluster_ids = model.span_representations(result)
    num_mentions = sum(len(cluster) for cluster in result.clusters)
    assert embeddings.shape == (num_mentions, model.model.span_scorer.span_dim)
    assert cluster_ids.tolist() == [i for i, cluster in enumerate(result.clusters) for _ in cluster]
    assert np.isfinite(embeddings).all()
    # g starts with the first subtoken's hidden state: mentions with different starts differ.
    starts = [span[0] for cluster in result.clusters for span in cluster]
    assert len({tuple(row[:8]) for row in embeddings.round(5)}) == len(set(starts))


MEMORY_SCRIPT = textwrap.dedent(
    """
    import json, random, sys, threading, time
    from coref_pipeline import CorefModel
    from coref_pipeline.runtime.devices import resident_bytes

    def resident_mb():
        return resident_bytes() / 2**20

    class PeakResident:
        # The largest resident set seen while the block runs, sampled every millisecond:
        # each phase has its own peak, whatever the process reached before it.
        def __enter__(self):
            self.start = self.peak = resident_mb()
            self.running = True
            self.thread = threading.Thread(target=self.sample, daemon=True)
            self.thread.start()
            return self
        def sample(self):
            while self.running:
                self.peak = max(self.peak, resident_mb())
                time.sleep(0.001)
        def __exit__(self, *exc):
            self.running = False
            self.thread.join()
            self.peak = max(self.peak, resident_mb())

    def text(num_words, seed):
        rng = random.Random(seed)
        sentences, count = [], 0
        while count < num_words:
            words = [f"w{rng.randrange(60)}" for _ in range(rng.randint(5, 15))]
            count += len(words)
            sentences.append(" ".join(words) + ".")
        return "  ".join(sentences)

    with PeakResident() as calibration:  # 256 MB touched, held a moment, freed
        block = bytearray(256 * 2**20)
        block[:: 4096] = b"x" * len(block[:: 4096])
        time.sleep(0.05)
        del block
    incremental = CorefModel.load(sys.argv[1])
    baseline = CorefModel.load(sys.argv[2], max_inference_subtokens=10**6)
    short, long_ = text(2000, 0), text(20000, 1)
    peaks = {}
    for name, model in (("incremental", incremental), ("baseline", baseline)):
        with PeakResident() as on_short:
            model.predict(short)
        with PeakResident() as on_long:
            result = model.predict(long_)
        peaks[name] = on_long.peak - on_short.peak
    print(json.dumps({"words": len(result.words), "clusters": len(result.clusters),
                      "calibration_mb": calibration.peak - calibration.start,
                      "incremental_growth_mb": peaks["incremental"], "baseline_growth_mb": peaks["baseline"]}))
    """
)


@pytest.mark.slow
def test_a_20000_word_text_through_the_incremental_model_in_bounded_memory(tmp_path):
    """Peak resident memory, sampled: a 20,000-word text against a 2,000-word one, in a fresh process whose
    allocator hands large blocks back when they are freed (what is held, not the kept heap's free blocks).

    The model's tensors do not grow with length; what grows is the document itself
    (its words, subtokens and maps, a few hundred bytes a word). The baseline on the
    same text grows by hundreds of MB: the measurement can tell the two apart. Each
    text has its own peak, so whatever the process reached before (loading, the other
    model) does not hide a growth.
    """
    if not Path("/proc/self/statm").exists():
        pytest.skip("this system has no /proc/self/statm to read the resident memory from")
    baseline_dir, incremental_dir = save_tiny_models(tmp_path, max_segment_len=64)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    # What the models hold, not the heap's free blocks: large blocks handed back when freed, as the inference
    # memory benchmark's held measure (glibc; elsewhere the allocator as it is).
    env = held_memory_environment(env) or env
    completed = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, str(incremental_dir), str(baseline_dir)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=900,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    figures = json.loads(completed.stdout.strip().splitlines()[-1])
    if figures["calibration_mb"] < 200:
        pytest.skip(f"this system's resident-memory figures do not show a 256 MB block ({figures})")
    assert figures["words"] >= 20000 and figures["clusters"] > 0
    added_words = figures["words"] - 2000
    incremental_growth_kb_per_word = figures["incremental_growth_mb"] * 1024 / added_words
    assert incremental_growth_kb_per_word < 2.0, figures
    assert figures["baseline_growth_mb"] > 10 * max(figures["incremental_growth_mb"], 1.0), figures


def test_a_corpus_segmented_with_another_tokenizer_is_refused(models, minilm_tokenizer):
    from coref_pipeline.formats.corpus import SegmentedCorpus
    from coref_pipeline.formats.segmentation import SegmentationMismatchError, SegmentationRecord

    minilm = SegmentationRecord.of("embedded:minilm", minilm_tokenizer, [32])
    for model in models.values():
        with pytest.raises(SegmentationMismatchError, match=r"another vocabulary.*kedro run --pipelines=segment"):
            model.predict_corpus(SegmentedCorpus({"test.english.32": []}, minilm), "test")
    tiny = SegmentationRecord.of("tiny", models["baseline"].tokenizer, [32])
    assert models["baseline"].predict_corpus(SegmentedCorpus({"test.english.32": []}, tiny), "test") == []


@pytest.mark.parametrize("model_type", ["baseline", "incremental"])
def test_bf16_inference_computes_in_bf16_on_fp32_weights(models, model_type, tmp_path):
    import torch

    directory = tmp_path / model_type
    models[model_type].save(directory)
    fp32, bf16 = CorefModel.load(directory), CorefModel.load(directory, precision="bf16-mixed")
    dtypes: dict[str, set] = {"encoder": set(), "pair scorer": set(), "src projection": set(), "other scorers": set()}

    def record(part: str):
        return lambda module, inputs, output: dtypes[part].add(output.dtype)

    def part(name: str) -> str:
        parts = ("encoder", "pair scorer", "src projection")
        return next((part for part in parts if name.split(".")[0] == part.replace(" ", "_")), "other scorers")

    hooks = [
        module.register_forward_hook(record(part(name)))
        for name, module in bf16.model.named_modules()
        if isinstance(module, torch.nn.Linear)
    ]
    result = bf16.predict(UNICODE_TEXT)
    for hook in hooks:
        hook.remove()
    # On a CPU the encoder, the coarse scorer's projection and the pair scorer's FFNN compute in bf16; the mention
    # scorer stays in fp32 (faster there: docs/benchmarks.md).
    assert dtypes == {
        "encoder": {torch.bfloat16},
        "pair scorer": {torch.bfloat16},
        "src projection": {torch.bfloat16},
        "other scorers": {torch.float32},
    }
    assert bf16.computation == (
        "bf16-mixed: the encoder and the antecedent scorers (coarse and fine) in bf16 (autocast), the mention scorer "
        "in fp32, on cpu"
    )
    assert fp32.model.pair_scorer.inference_dtype is None and bf16.model.pair_scorer.inference_dtype is None
    assert fp32.computation == "fp32 on cpu"
    assert all(parameter.dtype == torch.float32 for parameter in bf16.model.parameters())
    check_result(result, UNICODE_TEXT)
    assert result.clusters and fp32.predict(UNICODE_TEXT).words == result.words
    with pytest.raises(
        ValueError, match=r"inference precision must be one of \['auto', '32', 'bf16-mixed', '16-mixed'\]"
    ):
        CorefModel.load(directory, precision="bf16")


def test_an_incremental_model_saved_before_the_score_key_loads_with_the_papers_score(models, tmp_path):
    import dataclasses

    from coref_pipeline.models.incremental import IncrementalCorefModel
    from tests.models.tiny import tiny_encoder, tiny_hf_tokenizer

    config = dataclasses.replace(models["incremental"].config, score="paper")  # as every model before the key
    directory = tmp_path / "old"
    CorefModel("incremental", IncrementalCorefModel(config, tiny_encoder(seed=4)), tiny_hf_tokenizer()).save(directory)
    stored = json.loads((directory / "coref_config.json").read_text())
    assert stored["model"].pop("score") == "paper"
    (directory / "coref_config.json").write_text(json.dumps(stored))
    loaded = CorefModel.load(directory)
    assert loaded.config.score == "paper" and not hasattr(loaded.model, "src_projection")
    assert loaded.predict(UNICODE_TEXT).words


def test_fewer_antecedents_at_inference_score_the_top_coarse_ones_as_the_full_model_does(tmp_path):
    """``max_top_antecedents`` at load: each span's fine FFNN sees only its best antecedents by coarse
    score, and (coref_depth 1, no refinement over the antecedent set) scores each of them exactly as
    the model with all its antecedents does."""
    import torch

    from coref_pipeline.models.baseline import BaselineCorefModel
    from coref_pipeline.models.config import ConfigError
    from coref_pipeline.serving.coref_model import as_split_text
    from tests.models.tiny import tiny_config, tiny_encoder, tiny_hf_tokenizer
    from tests.tolerances import ffnn_terms, reordered

    config = tiny_config(max_segment_len=32, coref_depth=1)
    CorefModel("baseline", BaselineCorefModel(config, tiny_encoder(seed=3)), tiny_hf_tokenizer()).save(tmp_path / "b")
    full, few = CorefModel.load(tmp_path / "b"), CorefModel.load(tmp_path / "b", max_top_antecedents=2)
    assert few.config.max_top_antecedents == 2 < full.config.max_top_antecedents
    document = full.jsonlines_document(as_split_text(UNICODE_TEXT * 3), None, "nw", "d")
    full_output = full._forward_for_inference(full.tensorize(document))
    few_output = few._forward_for_inference(few.tensorize(document))
    assert torch.equal(few_output.top_span_starts, full_output.top_span_starts)  # the same kept spans
    assert few_output.top_antecedents.shape[1] == 2 < full_output.top_antecedents.shape[1]
    # The fine FFNN over [k, 2] pairs or [k, c]: GEMMs of other shapes, so its sums in other roundings.
    terms = ffnn_terms(full.model.pair_scorer.slow_antecedent_scores)
    scale = float(full_output.top_antecedent_scores[torch.isfinite(full_output.top_antecedent_scores)].abs().max())
    checked = 0
    for span in range(full_output.top_antecedents.shape[0]):
        real = full_output.top_antecedent_mask[span]
        full_scores = dict(
            zip(
                full_output.top_antecedents[span][real].tolist(),
                full_output.top_antecedent_scores[span, 1:][real].tolist(),
                strict=True,
            )
        )
        kept_mask = few_output.top_antecedent_mask[span]
        kept = few_output.top_antecedents[span][kept_mask].tolist()
        assert len(kept) == min(2, len(full_scores))
        for antecedent, score in zip(kept, few_output.top_antecedent_scores[span, 1:][kept_mask].tolist(), strict=True):
            assert score == pytest.approx(full_scores[antecedent], rel=reordered(terms), abs=reordered(terms) * scale)
            checked += 1
    assert checked > 10
    _, incremental_dir = save_tiny_models(tmp_path / "tiny")
    with pytest.raises(ConfigError, match="baseline setting"):
        CorefModel.load(incremental_dir, max_top_antecedents=2)
    with pytest.raises(ConfigError, match="model key 'max_top_antecedents' must be at least 1"):
        CorefModel.load(tmp_path / "b", max_top_antecedents=0)


def test_prediction_reads_the_scores_without_computing_the_training_loss(models, monkeypatch):
    """A document with gold mentions (a dev or test set) is predicted without the loss: it is not read."""
    from coref_pipeline.models.baseline import BaselineCorefModel
    from tests.models.tiny import make_document

    trained = models["baseline"]
    tensors = trained.tensorize(make_document(num_segments=3))
    assert tensors.gold_starts.numel() > 0
    expected = trained.predict_tensors(tensors)

    def no_loss(*_args, **_kwargs):
        raise AssertionError("the loss was computed for a prediction")

    monkeypatch.setattr(BaselineCorefModel, "loss", no_loss)
    assert trained.predict_tensors(tensors) == expected
    with pytest.raises(AssertionError, match="the loss was computed"):
        trained.model.eval()
        trained.model(tensors)  # called directly, the model still computes it on a document with gold


@pytest.mark.parametrize("model_type", ["baseline", "incremental"])
def test_precision_32_predicts_the_bits_of_the_plain_build_and_graph_path(models, model_type, tmp_path):
    # `predict --precision 32` as before its fast paths: a model built for its weights (no random initialisation)
    # and the mention scorer's in-place sums without autograd give the same scores, bit for bit, as the model
    # built and loaded plainly and, for the mention scores, as its out-of-place sums with autograd on (the path
    # every version before took).
    import torch

    from coref_pipeline.models.encoder import SegmentEncoder
    from coref_pipeline.models.serialization import load_model_directory
    from coref_pipeline.serving.coref_model import as_split_text

    directory = tmp_path / model_type
    models[model_type].save(directory)
    loaded = CorefModel.load(directory)
    _, _, encoder_config, state, _ = load_model_directory(directory)
    plain_model = type(loaded.model)(loaded.config, SegmentEncoder.from_config(encoder_config))
    plain_model.load_state_dict(state)
    plain = CorefModel(model_type, plain_model.eval(), loaded.tokenizer)
    tensors = loaded.tensorize(loaded.jsonlines_document(as_split_text(UNICODE_TEXT), None, "nw", "probe"))
    if model_type == "baseline":
        with torch.no_grad():
            fast, plainly_built = loaded.model(tensors, with_loss=False), plain.model(tensors, with_loss=False)
        with torch.enable_grad():
            before = plain.model(tensors, with_loss=False)
        assert torch.equal(fast.candidate_mention_scores, before.candidate_mention_scores.detach())
        assert torch.equal(fast.top_antecedent_scores, plainly_built.top_antecedent_scores)
    else:
        with torch.enable_grad():
            before = plain.model(tensors)
        assert loaded.predict_tensors(tensors) == before.clusters
    assert loaded.predict_tensors(tensors) == plain.predict_tensors(tensors)
    assert loaded.predict(UNICODE_TEXT).clusters == plain.predict(UNICODE_TEXT).clusters


@pytest.mark.parametrize("model_type", ["baseline", "incremental"])
def test_bf16_prediction_on_a_cpu_with_amx_computes_its_products_in_rows_of_few_sizes(
    models, model_type, tmp_path, monkeypatch
):
    from coref_pipeline.runtime import onednn

    directory = tmp_path / model_type
    models[model_type].save(directory)
    chunked: list[int] = []

    def counted(product, rows, *operands):
        chunked.append(rows)
        return in_chunks(product, rows, *operands)

    in_chunks = onednn._in_chunks
    monkeypatch.setattr(onednn, "_in_chunks", counted)
    for amx in (False, True):
        monkeypatch.setattr(onednn, "_amx_kernels", lambda amx=amx: amx)
        for precision in ("32", "bf16-mixed"):
            chunked.clear()
            result = CorefModel.load(directory, precision=precision).predict(UNICODE_TEXT)
            check_result(result, UNICODE_TEXT)
            # the encoder's and the antecedent scorers' products, in bf16 on a CPU whose oneDNN uses AMX only
            assert bool(chunked) == (amx and precision == "bf16-mixed")


def test_bf16_on_a_cpu_without_native_bf16_says_it_is_slower(models, tmp_path, monkeypatch, caplog):
    import coref_pipeline.serving.coref_model as coref_model

    directory = tmp_path / "baseline"
    models["baseline"].save(directory)
    monkeypatch.setattr(coref_model, "native_bf16", lambda device: None)
    with caplog.at_level("WARNING", logger="coref_pipeline.serving.coref_model"):
        CorefModel.load(directory, precision="bf16-mixed")
    assert "on a CPU without native bf16 (AVX512_BF16 or AMX): emulated, slower than fp32" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="coref_pipeline.serving.coref_model"):
        CorefModel.load(directory, precision="32")
    assert "native bf16" not in caplog.text


@pytest.mark.parametrize("model_type", ["baseline", "incremental"])
def test_prediction_runs_in_evaluation_mode_and_gives_a_model_in_training_mode_back(models, model_type, monkeypatch):
    """A loaded model predicts as it is (evaluation mode, no module walked); one left in training mode predicts
    without dropout, and is in training mode again afterwards."""
    model = models[model_type]
    seen = []  # the encoder's mode at each forward
    hook = model.model.encoder.register_forward_pre_hook(lambda module, inputs: seen.append(module.training))
    switches = []
    modes = type(model.model).train
    monkeypatch.setattr(type(model.model), "train", lambda self, mode=True: switches.append(mode) or modes(self, mode))
    try:
        expected = model.predict(UNICODE_TEXT).clusters
        assert switches == [] and seen and not any(seen)
        model.model.train()
        seen.clear()
        assert model.predict(UNICODE_TEXT).clusters == expected
        assert seen and not any(seen) and model.model.training
    finally:
        hook.remove()
        model.model.eval()


def test_a_model_on_a_cpu_holds_onednns_caches(onednn_caches_unset, tmp_path):
    """A kernel kept for each document's shapes grew a long bf16 prediction by a gigabyte (runtime.onednn)."""
    baseline_dir, _ = save_tiny_models(tmp_path)
    CorefModel.load(baseline_dir)
    assert {name: os.environ.get(name) for name in ONEDNN_CACHE_ENVIRONMENT} == ONEDNN_CACHE_ENVIRONMENT
