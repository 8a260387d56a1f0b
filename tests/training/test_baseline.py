"""Training: fitting, save/load, resume after a kill, reproducibility (tiny random encoder)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from coref_pipeline.evaluation.predictions import score_predictions
from coref_pipeline.formats.segmentation import SegmentationRecord
from coref_pipeline.models import attention
from coref_pipeline.models.baseline import BaselineCorefModel
from coref_pipeline.models.config import ConfigError, TrainingConfig
from coref_pipeline.models.encoder import SegmentEncoder
from coref_pipeline.serving.coref_model import CorefModel
from coref_pipeline.training import Run, TrainingCallback, baseline_recipe, fit, seed_everything
from coref_pipeline.training.checkpoints import latest_checkpoint
from coref_pipeline.training.loop import configure_encoder_for_training, epoch_order
from coref_pipeline.training.optim import warmup_then_linear_decay
from tests.models.tiny import VOCAB, make_document, tiny_config, tiny_encoder, tiny_hf_tokenizer

DOCUMENTS = [make_document(f"nw/d{i}_0", seed=i, num_segments=3) for i in range(3)]


def fresh_model(seed: int = 13) -> CorefModel:
    seed_everything(seed)
    model = BaselineCorefModel(tiny_config(top_span_ratio=0.8, max_span_width=3), tiny_encoder(seed, hidden=64))
    return CorefModel("baseline", model, tiny_hf_tokenizer())


class InterruptAfter(TrainingCallback):
    """Stops the run as a kill would, right after a step (and its checkpoint)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, state, loss, learning_rates) -> None:
        if state.global_step == self.step:
            raise KeyboardInterrupt(f"interrupted after step {state.global_step}")


def train(trained: CorefModel, config: TrainingConfig, work_dir: Path, **options) -> CorefModel:
    recipe = baseline_recipe(trained, config)
    return fit(trained, recipe, DOCUMENTS, DOCUMENTS, config, Run(work_dir, remove_singletons=False, **options))


def training_config(**overrides) -> TrainingConfig:
    values = dict(
        seed=13,
        num_epochs=80,
        bert_learning_rate=2e-3,
        task_learning_rate=5e-3,
        warmup_ratio=0.0,
        eval_frequency=1000,
        report_frequency=10,
        checkpoint_frequency=1000,
    )
    values.update(overrides)
    return TrainingConfig(**values)


def test_overfits_a_few_documents(tmp_path):
    # 120 epochs: at 80, one or two of six seeds stopped at 85-94 F1, with either attention dropout mask.
    trained = train(fresh_model(), training_config(num_epochs=120), tmp_path)
    predictions = trained.predict_documents(DOCUMENTS, progress=False)
    assert 100 * score_predictions(predictions, remove_singletons=False).conll_f1 >= 95


def test_an_encoder_of_another_architecture_trains_saves_and_loads_alike(tmp_path):
    # The README's larger-encoder recipe names MPNet (relative position buckets, <s> ids), which the prediction's
    # own BERT computation does not take: it trains through transformers' model and is loaded back as one.
    from transformers import AutoModel, MPNetConfig

    seed_everything(13)
    config = MPNetConfig(
        vocab_size=len(VOCAB),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=64,
        pad_token_id=VOCAB.index("[PAD]"),
    )
    model = BaselineCorefModel(
        tiny_config(top_span_ratio=0.8, max_span_width=3), SegmentEncoder(AutoModel.from_config(config))
    )
    trained = train(
        CorefModel("baseline", model, tiny_hf_tokenizer()), training_config(num_epochs=120), tmp_path / "run"
    )
    predictions = trained.predict_documents(DOCUMENTS, progress=False)
    assert 100 * score_predictions(predictions, remove_singletons=False).conll_f1 >= 95
    trained.save(tmp_path / "model")
    loaded = CorefModel.load(tmp_path / "model")
    assert type(loaded.model.encoder.model).__name__ == "MPNetModel"
    assert loaded.predict_documents(DOCUMENTS, progress=False) == predictions


def test_save_then_load_gives_identical_predictions(tmp_path):
    trained = fresh_model()
    model = trained.model
    trained.save(tmp_path / "model")
    loaded = CorefModel.load(tmp_path / "model")
    assert json.loads((tmp_path / "model" / "coref_config.json").read_text())["model_type"] == "baseline"
    for document in DOCUMENTS:
        a, b = trained.tensorize(document), loaded.tensorize(document)
        assert torch.equal(a.input_ids, b.input_ids)
        model.eval()
        with torch.no_grad():
            assert torch.equal(model(a).top_antecedent_scores, loaded.model(b).top_antecedent_scores)
        assert trained.predict_tensors(a) == loaded.predict_tensors(b)
    assert not list((tmp_path / "model").glob("*.bin")) and not list((tmp_path / "model").glob("*.pt"))


def final_weights(work_dir: Path, **overrides) -> dict[str, torch.Tensor]:
    config = training_config(num_epochs=2, checkpoint_frequency=1, **overrides)
    train(fresh_model(), config, work_dir)
    checkpoint = latest_checkpoint(work_dir)
    from safetensors.torch import load_file

    return load_file(checkpoint / "model.safetensors")


def test_a_killed_run_resumes_to_the_same_weights(tmp_path):
    uninterrupted = final_weights(tmp_path / "a")
    config = training_config(num_epochs=2, checkpoint_frequency=1)
    with pytest.raises(KeyboardInterrupt):
        train(fresh_model(), config, tmp_path / "b", callbacks=[InterruptAfter(4)])
    assert latest_checkpoint(tmp_path / "b").name == "step-0000004"
    # A new process would build the model afresh; the checkpoint restores everything else.
    train(fresh_model(seed=99), config, tmp_path / "b")
    from safetensors.torch import load_file

    resumed = load_file(latest_checkpoint(tmp_path / "b") / "model.safetensors")
    assert uninterrupted.keys() == resumed.keys()
    for name in uninterrupted:
        assert torch.equal(uninterrupted[name], resumed[name]), name


def test_the_same_seed_gives_the_same_metrics(tmp_path):
    scores = []
    for run in ("a", "b"):
        config = training_config(num_epochs=3)
        trained = train(fresh_model(), config, tmp_path / run)
        predictions = trained.predict_documents(DOCUMENTS, progress=False)
        scores.append(score_predictions(predictions, remove_singletons=False).to_dict())
    assert scores[0] == scores[1]


def test_a_finished_run_is_not_trained_again(tmp_path, caplog):
    config = training_config(num_epochs=1)
    train(fresh_model(), config, tmp_path)
    with caplog.at_level("INFO"):
        train(fresh_model(), config, tmp_path)
    assert "Training already finished" in caplog.text


def test_schedule_and_epoch_order():
    factor = warmup_then_linear_decay(total_steps=100, warmup_steps=10)
    assert [factor(s) for s in (0, 5, 10, 55, 100)] == [0.0, 0.5, 1.0, 0.5, 0.0]
    assert epoch_order(10, seed=1, epoch=0) == epoch_order(10, seed=1, epoch=0)
    assert epoch_order(10, seed=1, epoch=0) != epoch_order(10, seed=1, epoch=1)
    assert sorted(epoch_order(10, seed=1, epoch=3)) == list(range(10))


def test_a_changed_configuration_starts_afresh(tmp_path, caplog):
    train(fresh_model(), training_config(num_epochs=1), tmp_path)
    with caplog.at_level("INFO"):
        train(fresh_model(), training_config(num_epochs=2), tmp_path)
    assert "starting a fresh run" in caplog.text and "Training already finished" not in caplog.text
    assert latest_checkpoint(tmp_path).name == f"step-{2 * len(DOCUMENTS):07d}"


def test_a_change_to_the_model_or_training_code_starts_afresh(tmp_path, caplog, monkeypatch):
    from coref_pipeline.training import checkpoints

    package = tmp_path / "copy" / "coref_pipeline"
    shutil.copytree(checkpoints.PACKAGE_DIR, package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(checkpoints, "PACKAGE_DIR", package)
    config = training_config(num_epochs=1)
    train(fresh_model(), config, tmp_path / "run")
    with caplog.at_level("INFO"):
        train(fresh_model(), config, tmp_path / "run")
    assert "Training already finished" in caplog.text  # the same code: the finished run is kept
    caplog.clear()
    # A module the run executes (the model's layers; the dev scorer it selects with): a fresh run.
    for changed in ("models/layers.py", "evaluation/scoring.py"):
        source = package / changed
        source.write_text(source.read_text() + "\n# a change to code the run executes\n")
        with caplog.at_level("INFO"):
            train(fresh_model(), config, tmp_path / "run")
        assert (
            "starting a fresh run from step 0: it holds a run with another configuration, data or code" in caplog.text
        ), changed
        assert "Training already finished" not in caplog.text, changed
        caplog.clear()
    # A module it never imports (the score command): the finished run is kept.
    command = package / "cli" / "score.py"
    command.write_text(command.read_text() + "\n# a change elsewhere\n")
    with caplog.at_level("INFO"):
        train(fresh_model(), config, tmp_path / "run")
    assert "Training already finished" in caplog.text and "starting a fresh run" not in caplog.text


def test_init_from_loads_every_weight_and_refuses_another_architecture(tmp_path):

    from coref_pipeline.training import baseline_from
    from tests.models.tiny import save_tiny_models

    baseline_dir, incremental_dir = save_tiny_models(tmp_path)
    saved = CorefModel.load(baseline_dir)
    started = baseline_from(baseline_dir, replace(saved.config, dropout_rate=0.1, mention_loss_coef=0.5))
    assert started.config.mention_loss_coef == 0.5  # the run's own training keys
    state, expected = started.model.state_dict(), saved.model.state_dict()
    assert state.keys() == expected.keys()
    assert all(torch.equal(state[name], expected[name]) for name in expected)
    with pytest.raises(
        ConfigError, match=r"encoder: 'embedded:minilm' there, 'bert-base-cased' here|encoder: .* there"
    ):
        baseline_from(baseline_dir, replace(saved.config, encoder="bert-base-cased"))
    with pytest.raises(ConfigError, match=r"ffnn_size: \d+ there, 7 here"):
        baseline_from(baseline_dir, replace(saved.config, ffnn_size=7))
    with pytest.raises(ConfigError, match="holds a 'incremental' model; it must be a baseline"):
        baseline_from(incremental_dir, saved.config)
    # ffnn_size / max_top_antecedents auto fine-tune the start with its own head, whatever the run computes in
    auto = baseline_from(baseline_dir, replace(saved.config, ffnn_size="auto", max_top_antecedents="auto"))
    assert (auto.config.ffnn_size, auto.config.max_top_antecedents) == (
        saved.config.ffnn_size,
        saved.config.max_top_antecedents,
    )


def test_the_encoder_trains_with_the_cpu_attention_and_is_saved_with_its_own(tmp_path):
    def attention_dropouts(trained: CorefModel) -> set[float]:
        modules = trained.model.encoder.model.modules()
        return {m.dropout.p for m in modules if type(m).__name__.endswith("SelfAttention")}

    kept = train(fresh_model(), training_config(num_epochs=1, max_steps=2), tmp_path / "own")
    assert attention_dropouts(kept) == {0.1}  # the encoder's own attention dropout
    # The loop's encoder settings: the attention trains with the cheaper CPU dropout mask; the
    # model is saved without it (loaded: HF's own sdpa).
    encoder = tiny_encoder(3)
    configure_encoder_for_training(encoder, training_config())
    assert encoder.model.config._attn_implementation == attention.IMPLEMENTATION
    assert kept.model.encoder.model.config._attn_implementation == "sdpa"
    assert CorefModel.load(tmp_path / "own" / "best").model.encoder.model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("singletons", [True, False])
def test_mention_loss_auto_follows_whether_the_training_corpus_annotates_singletons(tmp_path, singletons, caplog):
    from coref_pipeline.formats.corpus import SegmentedCorpus
    from coref_pipeline.models.config import AUTO_MENTION_LOSS_COEF, BaselineConfig
    from coref_pipeline.training.loop import decide_for_corpus

    documents = [make_document(f"nw/t{i}_0", seed=i, num_segments=2) for i in range(3)]
    for document in documents:
        document["clusters"] = [cluster for cluster in document["clusters"] if len(cluster) > 1]
        if singletons:
            document["clusters"] += [[[1, 1]], [[3, 4]]]
    record = SegmentationRecord.of("tiny", tiny_hf_tokenizer(), [16]).to_dict()
    corpus = SegmentedCorpus({"train.english.16": documents}, record)
    config = BaselineConfig(max_segment_len=16, mention_loss_coef="auto")
    with pytest.raises(ConfigError, match="mention_loss_coef: auto is decided by the training corpus"):
        BaselineCorefModel(config, tiny_encoder(3))
    with caplog.at_level("INFO", logger="coref_pipeline.training.loop"):
        decided = decide_for_corpus(config, corpus)
    assert decided.mention_loss_coef == (AUTO_MENTION_LOSS_COEF if singletons else 0.0)
    assert "mention_loss_coef auto:" in caplog.text
    assert decide_for_corpus(replace(config, mention_loss_coef=0.25), corpus).mention_loss_coef == 0.25


@pytest.mark.parametrize(
    ("precision", "native", "head"),
    [
        ("32", None, "FP32_CPU_HEAD"),
        ("auto", None, "FP32_CPU_HEAD"),  # a CPU without bf16 units: auto is fp32
        ("auto", "a CPU with AMX", "FULL_HEAD"),
        ("bf16-mixed", None, "FULL_HEAD"),
    ],
)
def test_head_auto_is_the_smaller_head_in_fp32_on_a_cpu_and_the_full_one_elsewhere(
    precision, native, head, monkeypatch, caplog
):
    from coref_pipeline.models import config as model_config
    from coref_pipeline.models.config import BaselineConfig
    from coref_pipeline.runtime import devices
    from coref_pipeline.training.loop import decide_for_run

    monkeypatch.setattr(devices, "native_bf16", lambda device: native)
    config = BaselineConfig(max_segment_len=16, ffnn_size="auto", max_top_antecedents="auto")
    with pytest.raises(ConfigError, match="ffnn_size: auto is decided by the run's precision and device"):
        BaselineCorefModel(config, tiny_encoder(3))
    with caplog.at_level("INFO", logger="coref_pipeline"):
        decided, training = decide_for_run(config, TrainingConfig(device="cpu", precision=precision))
    expected = getattr(model_config, head)
    assert (decided.ffnn_size, decided.max_top_antecedents) == (expected["ffnn_size"], expected["max_top_antecedents"])
    assert training.precision == ("bf16-mixed" if head == "FULL_HEAD" else "32")  # decided once, for the run
    assert f"head auto: ffnn_size {expected['ffnn_size']}, max_top_antecedents {expected['max_top_antecedents']}" in (
        caplog.text
    )
    assert caplog.text.count("precision auto:") == (precision == "auto")
    # a number is kept, and each key is decided on its own
    kept, _ = decide_for_run(replace(config, ffnn_size=77), TrainingConfig(device="cpu", precision=precision))
    assert (kept.ffnn_size, kept.max_top_antecedents) == (77, expected["max_top_antecedents"])


def test_head_auto_is_refused_where_a_count_is_wanted_and_other_strings_everywhere():
    from coref_pipeline.models.config import BaselineConfig

    for key in ("ffnn_size", "max_top_antecedents"):
        with pytest.raises(ConfigError, match=f"model key '{key}' must be at least 1, or auto, got 'big'"):
            BaselineConfig.from_dict({key: "big"})
        with pytest.raises(ConfigError, match=f"model key '{key}' must be at least 1, or auto, got 0"):
            BaselineConfig.from_dict({key: 0})


def test_the_best_model_carries_its_training_record_through_save_and_load(tmp_path):
    config = training_config(num_epochs=2, eval_frequency=2)
    run = Run(tmp_path / "run", remove_singletons=False, log_params={"preset": "tiny", "overrides": {"seed": 13}})
    trained = fit(fresh_model(), baseline_recipe(fresh_model(), config), DOCUMENTS, DOCUMENTS, config, run)
    record = json.loads((tmp_path / "run" / "best" / "training.json").read_text())
    state = json.loads((latest_checkpoint(tmp_path / "run") / "state.json").read_text())["train_state"]
    # The wall time is kept apart (training_time.json, which DVC ignores): training.json holds what the inputs decide.
    assert "train_minutes" not in record
    record.update(json.loads((tmp_path / "run" / "best" / "training_time.json").read_text()))
    assert record["preset"] == "tiny" and record["overrides"] == {"seed": 13}
    assert record["steps"] == state["global_step"] == 6 and record["best_step"] == state["best_step"]
    assert record["best_dev_conll_f1"] == state["best_f1"]
    assert record["train_minutes"] == round(state["train_seconds"] / 60, 2)
    assert (record["precision"], record["device"], record["devices"], record["seed"]) == ("32", "cpu", 1, 13)
    assert (record["train_documents"], record["dev_documents"]) == (3, 3)
    assert record["model_type"] == "baseline" and len(record["run_fingerprint"]) == 64
    assert trained.training == record
    trained.save(tmp_path / "saved")
    assert CorefModel.load(tmp_path / "saved").training == record
    fresh_model().save(tmp_path / "untrained")  # a model not trained here has no record
    assert not (tmp_path / "untrained" / "training.json").exists()
    assert not (tmp_path / "untrained" / "training_time.json").exists()
    assert CorefModel.load(tmp_path / "untrained").training is None
