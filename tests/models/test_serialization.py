"""Model directories: the same weights give the same bytes, and a directory is written whole or not at all."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
import torch
import transformers.configuration_utils

from coref_pipeline.errors import OutputError
from coref_pipeline.models import serialization
from coref_pipeline.models.baseline import BaselineCorefModel
from coref_pipeline.models.encoder import SegmentEncoder
from coref_pipeline.serving.coref_model import CorefModel
from tests.models.tiny import tiny_config, tiny_encoder, tiny_hf_tokenizer


def tiny_model() -> CorefModel:
    return CorefModel("baseline", BaselineCorefModel(tiny_config(), tiny_encoder(seed=3)), tiny_hf_tokenizer())


def contents(directory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(directory)): path.read_bytes() for path in sorted(directory.rglob("*")) if path.is_file()
    }


def test_the_bytes_do_not_depend_on_the_installed_transformers(tmp_path, monkeypatch):
    model = tiny_model()
    model.save(tmp_path / "now")
    monkeypatch.setattr(transformers.configuration_utils, "__version__", "99.0.0")
    model.save(tmp_path / "later")
    assert contents(tmp_path / "now") == contents(tmp_path / "later")
    for name in ("encoder/config.json", "tokenizer/tokenizer_config.json"):
        saved = json.loads((tmp_path / "now" / name).read_text())
        assert not set(saved) & set(serialization.PROVENANCE_KEYS), name
    assert CorefModel.load(tmp_path / "later").config == model.config


def test_a_save_that_fails_leaves_the_earlier_directory_whole(tmp_path, monkeypatch):
    directory = tmp_path / "model"
    tiny_model().save(directory)
    before = contents(directory)

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(serialization, "atomic_save_tensors", full_disk)
    with pytest.raises(OutputError, match="cannot write .*model: no space left on the device"):
        CorefModel("baseline", BaselineCorefModel(tiny_config(), tiny_encoder(seed=9)), tiny_hf_tokenizer()).save(
            directory
        )
    assert contents(directory) == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model"]  # no temporary folder left


def test_the_candidate_rule_is_recorded_and_a_directory_written_before_it_loads_with_this_projects(tmp_path):
    """A model built here records ``special_token_spans: false``; a directory without the key (written before it
    existed) loads with that rule, and predicts what it predicted: no candidate over [CLS]/[SEP]."""
    from tests.models.tiny import make_document

    model = tiny_model()
    model.save(tmp_path / "model")
    path = tmp_path / "model" / "coref_config.json"
    saved = json.loads(path.read_text())
    assert saved["model"]["special_token_spans"] is False
    del saved["model"]["special_token_spans"]
    path.write_text(json.dumps(saved))
    earlier = CorefModel.load(tmp_path / "model")
    assert earlier.config.special_token_spans is False and earlier.config == model.config
    document = make_document(num_segments=3)
    tensors = earlier.tensorize(document)
    output = earlier.model.eval()(tensors, with_loss=False)
    spans = zip(output.candidate_starts.tolist(), output.candidate_ends.tolist(), strict=True)
    assert output.candidate_starts.numel() and not any(tensors.special[s : e + 1].any() for s, e in spans)
    predicted = earlier.predict_jsonlines(document)["predicted_clusters"]
    assert predicted == model.predict_jsonlines(document)["predicted_clusters"]


def test_a_refusal_of_the_operating_system_while_saving_weights_is_one_output_error(tmp_path):
    """safetensors' own writer reports the OS's refusal inside its error ("... (os error 21)"); it is told as
    every other write tells it (a full disk, seen in a real run, reads the same with errno 28)."""
    (tmp_path / ".model.safetensors.tmp").mkdir()  # a directory where the weights' temporary file goes
    with pytest.raises(OutputError) as refused:
        serialization.atomic_save_tensors({"weight": torch.zeros(3)}, tmp_path / "model.safetensors")
    assert (
        str(refused.value)
        == f"cannot write {tmp_path / 'model.safetensors'}: a directory is in the way (a file is expected there)"
    )
    assert not (tmp_path / "model.safetensors").exists()


def test_a_model_built_for_its_weights_is_the_model_built_then_loaded():
    # Built on the meta device, its position and token type ids filled by the HF model's own initialisation, the
    # weights copied in: every parameter and buffer as a random build followed by load_state_dict.
    config = tiny_config()
    trained = BaselineCorefModel(config, tiny_encoder(seed=4))
    state = trained.state_dict()
    encoder_config = trained.encoder.model.config
    built = serialization.build_with_weights(
        lambda: BaselineCorefModel(config, SegmentEncoder.from_config(encoder_config)), state
    )
    plain = BaselineCorefModel(config, SegmentEncoder.from_config(encoder_config))
    plain.load_state_dict(state)
    expected = {**dict(plain.named_parameters()), **dict(plain.named_buffers())}
    found = {**dict(built.named_parameters()), **dict(built.named_buffers())}
    assert found.keys() == expected.keys() and "encoder.model.embeddings.position_ids" in found
    for name, tensor in expected.items():
        assert found[name].device.type == "cpu" and found[name].dtype == tensor.dtype
        assert torch.equal(found[name], tensor), name
        assert found[name].requires_grad == tensor.requires_grad, name


def test_a_buffer_outside_an_hf_model_is_built_as_the_module_builds_it():
    # No HF initialisation knows it: the module is built (and initialised) as usual, then loaded.
    class WithSteps(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(3, 2)
            self.register_buffer("steps", torch.arange(4), persistent=False)

    weights = WithSteps().state_dict()
    built = serialization.build_with_weights(WithSteps, weights)
    assert torch.equal(built.steps, torch.arange(4)) and torch.equal(built.linear.weight, weights["linear.weight"])


def test_a_directory_loaded_for_prediction_gives_what_transformers_gives(tmp_path):
    """``load_model_directory(..., for_prediction=True)`` reads the encoder's configuration and the tokenizer without
    transformers (``StoredBertConfig``, ``DeferredTokenizer``): the same ids (an unknown token's too), vocabulary and
    fingerprint as transformers' tokenizer of the folder, the same configuration, and a model loaded so saves the
    same bytes. The packaged MiniLM's tokenizer (a real vocabulary, lower-casing) reads as transformers reads it."""
    from coref_pipeline.formats.segmentation import tokenizer_fingerprint
    from coref_pipeline.models.bert import StoredBertConfig
    from coref_pipeline.pretrained import embedded_minilm_path, load_tokenizer
    from tests.models.test_bert import described
    from tests.models.tiny import VOCAB

    tiny_model().save(tmp_path / "saved")
    _, _, config, _, tokenizer = serialization.load_model_directory(tmp_path / "saved", for_prediction=True)
    _, _, their_config, _, theirs = serialization.load_model_directory(tmp_path / "saved")
    assert isinstance(config, StoredBertConfig) and isinstance(tokenizer, serialization.DeferredTokenizer)
    assert described(config.to_transformers()) == described(their_config)
    tokens = [*VOCAB, "w60", "ünknown"]
    assert tokenizer.convert_tokens_to_ids(VOCAB) == theirs.convert_tokens_to_ids(VOCAB)
    assert tokenizer.convert_tokens_to_ids(tokens) == theirs.convert_tokens_to_ids(tokens)
    assert tokenizer.convert_tokens_to_ids("w7") == theirs.convert_tokens_to_ids("w7")
    assert tokenizer.get_vocab() == theirs.get_vocab()
    assert tokenizer_fingerprint(tokenizer) == tokenizer_fingerprint(theirs)
    CorefModel.load(tmp_path / "saved", for_prediction=True).save(tmp_path / "again")
    assert contents(tmp_path / "again") == contents(tmp_path / "saved")

    minilm = serialization.DeferredTokenizer(Path(embedded_minilm_path()))
    transformers_minilm = load_tokenizer("embedded:minilm")
    assert minilm.get_vocab() == transformers_minilm.get_vocab()
    assert tokenizer_fingerprint(minilm) == tokenizer_fingerprint(transformers_minilm)
    words = ["Ada", "met", "Babbage", "in", "1833", "##s", "[CLS]", "naïve", "zzqxj"]
    assert minilm.convert_tokens_to_ids(words) == transformers_minilm.convert_tokens_to_ids(words)


def test_raw_text_words_split_for_prediction_as_transformers_splits_them(tmp_path):
    """The packaged MiniLM's tokenizer read for prediction (``DeferredTokenizer``, no transformers) splits words into
    the subtokens transformers' tokenizer gives (``tokenize_documents``): over 128 words at once (its file keeps the
    hub's truncation at 128 and padding to 128, which transformers sets aside for each call), accents, other
    scripts, a word with no subtokens, one too long for WordPiece, a special token written as a word; and it names
    the same special tokens. Without them in ``tokenizer_config.json`` it asks transformers' tokenizer."""
    import shutil

    from coref_pipeline.formats.segmentation import SpecialTokens, tokenize_documents
    from coref_pipeline.formats.text import split_text
    from coref_pipeline.pretrained import embedded_minilm_path, load_tokenizer

    text = (
        "“Ada,” said Charles — “your notes are longer than my paper!” She didn’t mind. Zoë (née Müller) wrote "
        "«C’est magnifique» in 1843; 東京 and Αθήνα, \u200b, [CLS] and [SEP], " + "x" * 120 + ". "
    ) + " ".join(f"word{i} w{i % 7}-{i}" for i in range(150))
    words = list(split_text(text).words)
    assert len(words) > 300
    minilm = serialization.DeferredTokenizer(Path(embedded_minilm_path()))
    theirs = load_tokenizer("embedded:minilm")
    ours = tokenize_documents([words, words[:5], ["\u200b"]], minilm)
    expected = tokenize_documents([words, words[:5], ["\u200b"]], theirs)
    for split, their_split in zip(ours, expected, strict=True):
        assert split.subtokens == their_split.subtokens
        assert split.word_index.tolist() == their_split.word_index.tolist()
    assert len(ours[0].subtokens) > 300 and "[UNK]" in ours[0].subtokens and ours[2].subtokens == ["[UNK]"]
    assert SpecialTokens.from_tokenizer(minilm) == SpecialTokens.from_tokenizer(theirs)
    assert minilm._loaded is None  # transformers' tokenizer was not needed

    shutil.copytree(embedded_minilm_path(), tmp_path / "minilm")
    (tmp_path / "minilm" / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    bare = serialization.DeferredTokenizer(tmp_path / "minilm")
    assert SpecialTokens.from_tokenizer(bare) == SpecialTokens.from_tokenizer(theirs)


@pytest.mark.parametrize("broken", ["tokenizer/tokenizer.json", "encoder/config.json"])
def test_a_malformed_file_read_for_prediction_is_one_error_naming_it(tmp_path, broken):
    """The files a model loaded for prediction reads itself (not through transformers) refuse bad content as
    transformers did: an error naming the file (``predict`` prints it in one line), not the tokenizers library's
    bare exception."""
    tiny_model().save(tmp_path / "saved")
    (tmp_path / "saved" / broken).write_text("{not json", encoding="utf-8")
    with pytest.raises((OSError, ValueError), match=f"saved/{broken}: not a"):  # what `predict` prints in a line
        CorefModel.load(tmp_path / "saved", for_prediction=True)
