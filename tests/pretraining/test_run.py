"""SpanBERT's pretraining through the shared loop: it learns, its output is an encoder, a killed run resumes."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from safetensors.torch import load_file

from coref_pipeline.config_base import ConfigError
from coref_pipeline.formats.corpus import SegmentedCorpus
from coref_pipeline.formats.segmentation import SegmentationRecord
from coref_pipeline.models.config import TrainingConfig
from coref_pipeline.models.directory import TRAINING_TIME
from coref_pipeline.pretraining.run import HEADS_FILE, SETTINGS_FILE, PretrainConfig, pretrain_encoder
from coref_pipeline.training.loop import Run, TrainingCallback
from tests.models.tiny import tiny_encoder, tiny_hf_tokenizer
from tests.paths import PROJECT_ROOT


@pytest.fixture
def encoder_dir(tmp_path):
    """A tiny BERT and its tokenizer saved like a downloaded hub model (no masked-LM head, as the MiniLM)."""
    path = tmp_path / "tiny-bert"
    tiny_encoder(hidden=32, dropout=0.0).model.save_pretrained(path)
    tiny_hf_tokenizer().save_pretrained(path)
    return path


def cyclic_document(doc_key: str, start: int, num_segments: int = 3) -> dict:
    """Segments of 14 words ``w10 w11 ... w29 w10 ...`` from ``start``: each masked word follows from its
    neighbours, so that both objectives can be learnt by a tiny model in a few steps."""
    sentences, subtoken_map, word = [], [], 0
    for _ in range(num_segments):
        body = [f"w{10 + (start + word + i) % 20}" for i in range(14)]
        sentences.append(["[CLS]", *body, "[SEP]"])
        subtoken_map += [word, *range(word, word + 14), word + 13]
        word += 14
    return {"doc_key": doc_key, "sentences": sentences, "subtoken_map": subtoken_map}


def corpus(encoder_dir, documents=12) -> SegmentedCorpus:
    train = [cyclic_document(f"nw/t{i}_0", start=7 * i) for i in range(documents)]
    record = SegmentationRecord.of(str(encoder_dir), tiny_hf_tokenizer(), [16]).to_dict()
    return SegmentedCorpus({"train.english.16": train}, record)


def settings(encoder_dir, **training_keys):
    config = PretrainConfig(
        encoder=str(encoder_dir), max_segment_len=16, batch_segments=4, held_out_share=0.3, max_span_words=3
    )
    values = dict(bert_learning_rate=3e-3, num_epochs=8, eval_frequency=6, report_frequency=3, checkpoint_frequency=6)
    return config, TrainingConfig(**{**values, "device": "cpu", **training_keys})


class Evaluations(TrainingCallback):
    def __init__(self) -> None:
        self.metrics = []

    def on_evaluation(self, state, metrics):
        self.metrics.append((state.global_step, dict(metrics)))


def test_pretraining_lowers_the_held_out_loss_and_writes_an_encoder_directory(encoder_dir, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    config, training = settings(encoder_dir, eval_on_start=True)
    evaluations = Evaluations()
    run = Run(tmp_path / "work", remove_singletons=False, callbacks=[evaluations])
    kept = pretrain_encoder(corpus(encoder_dir), config, training, run, tmp_path / "encoder", corpus_name="cyclic")
    out = tmp_path / "encoder"
    (first_step, first), (_, last) = evaluations.metrics[0], evaluations.metrics[-1]
    assert dict(evaluations.metrics)[kept["best_step"]] == {k: kept[k] for k in first}  # the metrics of the one kept
    assert first_step == 0 and last["loss"] < first["loss"] - 1.0
    assert last["mlm_loss"] < first["mlm_loss"] and last["sbo_loss"] < first["sbo_loss"]
    # the output: an encoder Hugging Face loads, its tokenizer, the heads and the settings beside them
    encoder = AutoModel.from_pretrained(out)
    start = AutoModel.from_pretrained(encoder_dir)
    before = start.state_dict()
    assert encoder.state_dict().keys() == before.keys()
    assert any(not torch.equal(tensor, before[name]) for name, tensor in encoder.state_dict().items())
    assert AutoTokenizer.from_pretrained(out).convert_tokens_to_ids(["w3"]) == [8]
    heads = load_file(out / HEADS_FILE)
    assert {"mlm.transform.dense.weight", "sbo.positions.weight"} <= set(heads)
    assert "mlm.decoder.weight" not in heads  # the decoder is the encoder's embedding matrix
    assert json.loads((out / SETTINGS_FILE).read_text())["pretrain"]["masking"] == "span"
    # its card: the Hub's format, the held-out figures returned (the pipeline's metrics file) in its model-index
    card = (out / "README.md").read_text()
    header = yaml.safe_load(card[4:].split("\n---\n", 1)[0])
    (result,) = header["model-index"][0]["results"]
    assert {metric["type"]: metric["value"] for metric in result["metrics"]} == {
        key: value for key, value in kept.items() if key not in ("steps", "best_step")
    }
    assert header["library_name"] == "transformers" and result["dataset"]["type"] == "cyclic"
    assert f"Kept at step {kept['best_step']} of {kept['steps']}" in card
    assert "span masking and the span boundary objective" in card
    # nothing the clock decides in the card: the wall time has a file of its own, which DVC ignores
    assert "minutes" not in card and TRAINING_TIME in (PROJECT_ROOT / ".dvcignore").read_text().split("\n")
    assert set(json.loads((out / TRAINING_TIME).read_text())) == {"train_minutes"}


def test_without_the_span_boundary_objective_its_loss_is_zero_and_no_head_is_kept(encoder_dir, tmp_path):
    config, training = settings(encoder_dir, max_steps=2)
    config = PretrainConfig.from_dict({**config.to_dict(), "sbo": False, "masking": "subword"})
    evaluations = Evaluations()
    run = Run(tmp_path / "work", remove_singletons=False, callbacks=[evaluations])
    pretrain_encoder(corpus(encoder_dir), config, training, run, tmp_path / "encoder")
    out = tmp_path / "encoder"
    assert all(metrics["sbo_loss"] == 0.0 for _, metrics in evaluations.metrics)
    assert not any(name.startswith("sbo.") for name in load_file(out / HEADS_FILE))


class Interrupt(TrainingCallback):
    def __init__(self, at_step: int) -> None:
        self.at_step = at_step

    def on_step_end(self, state, loss, learning_rates):
        if state.global_step == self.at_step:
            raise KeyboardInterrupt


def test_a_killed_run_resumes_to_the_weights_of_an_uninterrupted_one(encoder_dir, tmp_path):
    config, training = settings(encoder_dir, num_epochs=3)
    pretrain_encoder(
        corpus(encoder_dir), config, training, Run(tmp_path / "whole", remove_singletons=False), tmp_path / "a"
    )
    with pytest.raises(KeyboardInterrupt):  # killed after the checkpoint of step 6, two steps later
        pretrain_encoder(
            corpus(encoder_dir),
            config,
            training,
            Run(tmp_path / "resumed", remove_singletons=False, callbacks=[Interrupt(8)]),
            tmp_path / "b",
        )
    pretrain_encoder(
        corpus(encoder_dir), config, training, Run(tmp_path / "resumed", remove_singletons=False), tmp_path / "b"
    )
    whole, resumed = tmp_path / "a", tmp_path / "b"
    for name in ("model.safetensors", HEADS_FILE):  # the best kept
        assert (whole / name).read_bytes() == (resumed / name).read_bytes(), name
    final = [sorted((tmp_path / run / "checkpoints").glob("step-*"))[-1] for run in ("whole", "resumed")]
    assert final[0].name == final[1].name == "step-0000018"
    assert load_file(final[0] / "model.safetensors").keys() == load_file(final[1] / "model.safetensors").keys()
    assert (final[0] / "model.safetensors").read_bytes() == (final[1] / "model.safetensors").read_bytes()


def test_a_corpus_of_one_document_is_refused_in_one_line(encoder_dir, tmp_path):
    config, training = settings(encoder_dir)
    with pytest.raises(ConfigError, match="at least 2 are needed"):
        pretrain_encoder(corpus(encoder_dir, 1), config, training, Run(tmp_path / "w", False), tmp_path / "out")


def test_unknown_and_out_of_range_keys_are_named():
    with pytest.raises(ConfigError, match="masking"):
        PretrainConfig(masking="entity")
    with pytest.raises(ConfigError, match="held_out_share"):
        PretrainConfig(held_out_share=0.0)
    with pytest.raises(ConfigError, match="unknown"):
        PretrainConfig.from_dict({"span_masking": True})


def test_plain_text_files_and_folders_become_segmented_training_documents(encoder_dir, tmp_path):
    from coref_pipeline.pretraining.run import text_documents

    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("w10 w11 w12. w13 w14 w15 w16 w17 w18 w19 w20 w21 w22 w23 w24.\n")
    (tmp_path / "b.txt").write_text("w30 w31.\n")
    documents = text_documents([tmp_path / "texts", tmp_path / "b.txt"], str(encoder_dir), 16)
    assert [document["doc_key"].rsplit("/", 1)[-1] for document in documents] == ["a.txt", "b.txt"]
    assert [len(segment) for segment in documents[0]["sentences"]] == [6, 15]  # a sentence a segment, with [CLS], [SEP]
    assert documents[1]["sentences"] == [["[CLS]", "w30", "w31", "[UNK]", "[SEP]"]]  # "." is not in its vocabulary
    with pytest.raises(ConfigError, match="neither a file nor a folder"):
        text_documents([tmp_path / "missing.txt"], str(encoder_dir), 16)
    # A folder without .txt files (the default data/01_raw/pretrain_text before a user fills it) adds nothing.
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "README.md").write_text("not read\n")
    assert text_documents([tmp_path / "empty"], str(encoder_dir), 16) == []


def test_the_default_text_folder_is_in_the_repository_and_a_dependency_of_the_dvc_stage():
    import yaml

    from tests.paths import PROJECT_ROOT

    parameters = yaml.safe_load((PROJECT_ROOT / "conf/base/parameters_pretrain.yml").read_text())["pretrain"]
    stages = yaml.safe_load((PROJECT_ROOT / "dvc.yaml").read_text())["stages"]
    for folder in parameters["text"]:
        assert (PROJECT_ROOT / folder).is_dir() and folder in stages["pretrain"]["deps"]
    # coref_train depends on the encoder directory pretrain writes (encoder_from names it)
    assert parameters["out_dir"] in stages["coref_train"]["deps"]
    assert parameters["out_dir"] in [
        next(iter(out)) if isinstance(out, dict) else out for out in stages["pretrain"]["outs"]
    ]
