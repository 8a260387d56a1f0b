"""The BERT encoder computed without transformers' model stack: transformers' values, and refused where it is not."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import BertConfig

from coref_pipeline.models.bert import InferenceBert, computes
from coref_pipeline.models.encoder import SegmentEncoder
from tests.models.tiny import VOCAB, make_document, tiny_config, tiny_encoder, tiny_tensors
from tests.tolerances import assert_reordered_close


def described(config) -> dict:
    """A transformers configuration's values, less those that say where it was read from."""
    from coref_pipeline.models.serialization import PROVENANCE_KEYS

    return {key: value for key, value in config.to_dict().items() if key not in PROVENANCE_KEYS}


def inference_copy(encoder: SegmentEncoder) -> SegmentEncoder:
    """The encoder as a model directory's is loaded to predict: built for inference, holding ``encoder``'s weights."""
    loaded = SegmentEncoder.for_inference(encoder.model.config)
    loaded.load_state_dict(encoder.state_dict())  # strict: the same names
    return loaded.eval()


def encoder_terms(config) -> int:
    """The reduction lengths along one token's chain through a BERT encoder of ``config``'s sizes, for
    ``reordered``: per layer the query, key and value products (hidden), the attention scores (head size) and
    their weighted sum (at most the positions), the attention's output (hidden) and the feed-forward pair (hidden,
    then intermediate)."""
    head_size = config.hidden_size // config.num_attention_heads
    per_layer = 5 * config.hidden_size + head_size + config.max_position_embeddings + config.intermediate_size
    return config.num_hidden_layers * per_layer


@pytest.mark.parametrize("precision", [None, torch.bfloat16])
def test_inference_bert_computes_what_transformers_computes(precision):
    """The same operations on the same weights. Unpadded segments (no mask): the same shapes in the same order, the
    same values bit for bit. A padded batch, whose dense layers read only its real tokens (packed: other matrix
    shapes, which a GEMM may block and split otherwise), the same values at every real token to what a reordered
    sum allows: fp32's ``reordered`` bound, and under CPU autocast to bf16 a bf16 rounding (2**-8) per rounded
    product along the chain, six a layer."""
    transformers_encoder = tiny_encoder(seed=5).eval()
    loaded = inference_copy(transformers_encoder)
    assert isinstance(loaded.model, InferenceBert)
    document = tiny_tensors(make_document(num_segments=3), tiny_config())
    lengths = document.lengths()
    assert len(set(lengths)) > 1  # padding in the batch
    for encoder in (transformers_encoder, loaded):
        encoder.compute_dtype = precision
    config = transformers_encoder.model.config
    with torch.no_grad():
        for given in (None, lengths):
            expected = transformers_encoder(document.input_ids, document.attention_mask, given)
            actual = loaded(document.input_ids, document.attention_mask, given)
            if precision is None:
                assert_reordered_close(actual, expected, encoder_terms(config))
            else:
                bound = 6 * config.num_hidden_layers * 2.0**-8 * float(expected.abs().max())
                torch.testing.assert_close(actual, expected, rtol=0, atol=bound)
        one = document.input_ids[:1, : lengths[0]]  # one segment, no padding: no mask
        expected = transformers_encoder(one, torch.ones_like(one), [lengths[0]])
        assert torch.equal(loaded(one, torch.ones_like(one), [lengths[0]]), expected)


def test_a_padded_batch_packed_puts_every_token_where_it_was():
    """Packing moves real tokens and nothing else: a segment encoded in a padded batch (its dense layers over the
    packed real tokens) is encoded as alone, to a reordered sum, wherever the padding lies; the padding comes back
    as zeros."""
    encoder = inference_copy(tiny_encoder(seed=7)).model
    ids = torch.randint(1, len(VOCAB), (3, 12))
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[0, 9:] = 0  # a shorter first segment, and a last one shorter still
    mask[2, 4:] = 0
    with torch.no_grad():
        batch = encoder(ids, mask).last_hidden_state  # [3, 12, hidden]
        for row in range(3):
            length = int(mask[row].sum())
            alone = encoder(ids[row : row + 1, :length]).last_hidden_state[0]  # [length, hidden]
            assert_reordered_close(batch[row, :length], alone, encoder_terms(encoder.config))
            assert not batch[row, length:].any()


def tiny_bert_config(**changes) -> BertConfig:
    return BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        **changes,
    )


@pytest.mark.parametrize(
    "changes",
    [{"position_embedding_type": "relative_key"}, {"hidden_act": "gelu_new"}, {"is_decoder": True}],
    ids=["relative positions", "another activation", "a decoder"],
)
def test_an_encoder_it_does_not_compute_stays_transformers_own(changes):
    config = tiny_bert_config(**changes)
    assert not computes(config)
    assert not isinstance(SegmentEncoder.for_inference(config).model, InferenceBert)
    with pytest.raises(ValueError, match="does not compute"):
        InferenceBert(config)
    assert computes(tiny_bert_config())


def test_training_takes_transformers_model_back_with_the_same_parameters():
    """The inference module refuses training mode in one line; ``make_trainable`` gives the encoder to transformers'
    own model (dropout, checkpointing) holding the very parameter objects (an optimiser made before still trains
    them), the random generator untouched (no initialisation)."""
    original = tiny_encoder(seed=7)
    encoder = inference_copy(original)
    parameters = list(encoder.parameters())
    optimiser = torch.optim.SGD(parameters, lr=0.1)
    document = tiny_tensors(make_document(num_segments=2), tiny_config())
    encoder.train()
    with pytest.raises(RuntimeError, match=r"no dropout: .* call model.encoder.make_trainable\(\) first"):
        encoder(document.input_ids, document.attention_mask)
    state = torch.random.get_rng_state()
    encoder.make_trainable()
    assert torch.equal(torch.random.get_rng_state(), state)
    assert not isinstance(encoder.model, InferenceBert) and encoder.model.training
    assert [id(p) for p in encoder.parameters()] == [id(p) for p in parameters]
    weights = encoder.state_dict()
    assert weights.keys() == original.state_dict().keys()
    assert all(torch.equal(weights[name], value) for name, value in original.state_dict().items())
    encoder(document.input_ids, document.attention_mask).sum().backward()
    before = encoder.model.embeddings.word_embeddings.weight.clone()
    optimiser.step()  # the optimiser made before the switch moves the model's weights
    assert not torch.equal(encoder.model.embeddings.word_embeddings.weight, before)
    encoder.enable_gradient_checkpointing()
    assert encoder.is_checkpointing


def test_the_pooled_output_is_transformers_own():
    transformers_encoder = tiny_encoder(seed=9).eval()
    loaded = inference_copy(transformers_encoder)
    ids = torch.arange(5, 17).reshape(2, 6)
    with torch.no_grad():
        expected = transformers_encoder.model(input_ids=ids).pooler_output
        assert torch.equal(loaded.model(ids).pooler_output, expected)


def test_a_stored_configuration_is_read_only_when_it_states_what_inference_bert_reads(tmp_path):
    """``StoredBertConfig.read`` (a model directory's ``encoder/config.json`` for prediction, read without
    transformers): the transformers configuration it stands for is the one transformers reads from the same file,
    and InferenceBert from it computes what it computes from that one. A file that leaves out a setting InferenceBert
    reads (transformers would fill in its default) or names one it does not compute is not read: transformers'
    configuration is used instead."""
    from transformers import AutoConfig

    from coref_pipeline.models.bert import StoredBertConfig

    original = tiny_encoder(seed=5).eval()
    original.model.config.save_pretrained(tmp_path / "whole")
    stored = StoredBertConfig.read(tmp_path / "whole" / "config.json")
    theirs = AutoConfig.from_pretrained(tmp_path / "whole")
    assert stored is not None and described(stored.to_transformers()) == described(theirs)
    ours, transformers_own = SegmentEncoder.for_inference(stored), SegmentEncoder.for_inference(theirs)
    for encoder in (ours, transformers_own):
        encoder.load_state_dict(original.state_dict())
        encoder.eval()
    ids = torch.arange(5, 17).reshape(2, 6)
    with torch.no_grad():
        assert torch.equal(ours.model(ids).last_hidden_state, transformers_own.model(ids).last_hidden_state)
    for name, change in (("short", {"layer_norm_eps": None}), ("other", {"hidden_act": "gelu_new"})):
        values = theirs.to_dict()
        values.update(change)
        values = {key: value for key, value in values.items() if value is not None}
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(values))
        assert StoredBertConfig.read(tmp_path / name / "config.json") is None, name
