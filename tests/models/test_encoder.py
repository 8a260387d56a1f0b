"""The segment encoder: gradient checkpointing recomputes activations and changes no gradient."""

from __future__ import annotations

import torch

from tests.models.tiny import make_document, tiny_config, tiny_encoder, tiny_tensors


def encoder_gradients(checkpointing: bool) -> dict[str, torch.Tensor]:
    encoder = tiny_encoder(seed=3, dropout=0.0)
    if checkpointing:
        encoder.enable_gradient_checkpointing()
    encoder.train()
    document = tiny_tensors(make_document(num_segments=3), tiny_config())
    hidden = encoder(document.input_ids, document.attention_mask)  # [n, H]
    (hidden**2).sum().backward()
    return {
        name: parameter.grad.clone() for name, parameter in encoder.named_parameters() if parameter.grad is not None
    }


def test_gradient_checkpointing_gives_the_same_gradients():
    plain, checkpointed = encoder_gradients(False), encoder_gradients(True)
    assert plain.keys() == checkpointed.keys() and len(plain) > 10
    for name in plain:  # the recomputed forward is the same kernels on the same shapes: the same roundings
        assert torch.equal(checkpointed[name], plain[name]), name
    encoder = tiny_encoder(seed=3)
    encoder.enable_gradient_checkpointing()
    assert encoder.is_checkpointing and not tiny_encoder(seed=3).is_checkpointing


def train_mode_outputs(encoder) -> tuple[torch.Tensor, torch.Tensor]:
    encoder.train()
    document = tiny_tensors(make_document(num_segments=3), tiny_config())
    torch.manual_seed(0)
    first = encoder(document.input_ids, document.attention_mask)
    torch.manual_seed(1)
    return first, encoder(document.input_ids, document.attention_mask)


def test_attention_on_a_gpu_leaves_out_cudnn_and_keeps_the_other_kernels():
    from coref_pipeline.models.encoder import attention_without_cudnn

    cuda = torch.backends.cuda
    before = (cuda.cudnn_sdp_enabled(), cuda.flash_sdp_enabled(), cuda.mem_efficient_sdp_enabled())
    with attention_without_cudnn():
        assert not cuda.cudnn_sdp_enabled()
        assert cuda.flash_sdp_enabled() and cuda.mem_efficient_sdp_enabled() and cuda.math_sdp_enabled()
    assert (cuda.cudnn_sdp_enabled(), cuda.flash_sdp_enabled(), cuda.mem_efficient_sdp_enabled()) == before


def test_segment_lengths_known_on_the_host_give_the_same_outputs_and_gradients():
    """With the segments' lengths given (``DocumentTensors.segment_lengths``) the padding is cut by slices, and a
    batch without padding gets no mask: exactly the outputs, and gradients, of reading the mask back."""
    document = tiny_tensors(make_document(num_segments=3), tiny_config())
    lengths = document.lengths()
    assert len(set(lengths)) > 1  # padded segments
    results = []
    for given in (None, lengths):
        encoder = tiny_encoder(seed=3, dropout=0.0).train()
        hidden = encoder(document.input_ids, document.attention_mask, given)  # [n, H]
        (hidden**2).sum().backward()
        gradients = {name: p.grad for name, p in encoder.named_parameters() if p.grad is not None}
        with torch.no_grad():  # one segment on its own: no padding at all
            single = encoder(
                document.input_ids[1:2], document.attention_mask[1:2], None if given is None else [lengths[1]]
            )
        results.append((hidden, gradients, single))
    (hidden, gradients, single), (sliced, sliced_gradients, sliced_single) = results
    assert hidden.shape[0] == sum(lengths) and torch.equal(sliced, hidden) and torch.equal(sliced_single, single)
    assert gradients.keys() == sliced_gradients.keys()
    assert all(torch.equal(sliced_gradients[name], gradients[name]) for name in gradients)
