"""The segment encoder: any HF BERT-family model, segments encoded independently."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

import torch
from torch import nn

from coref_pipeline.runtime.onednn import prediction_autocast


class SegmentEncoder(nn.Module):
    """Encodes a document's segments in batches and flattens them to its subtoken sequence."""

    def __init__(self, model: nn.Module, segment_batch_size: int = 16) -> None:
        super().__init__()
        self.model = model
        self.segment_batch_size = segment_batch_size
        self.compute_dtype: torch.dtype | None = None  # set by ``computing_in``; None: the caller's precision

    @contextmanager
    def computing_in(self, dtype: torch.dtype | None) -> Iterator[None]:
        """Within it, the encoder computes under autocast to ``dtype`` and returns float32 (None: as the caller
        computes). Inference on a CPU uses it: there most of the task's scorers are faster in float32 than under
        autocast (docs/benchmarks.md, "Throughput of ``predict`` on a CPU")."""
        previous, self.compute_dtype = self.compute_dtype, dtype
        try:
            yield
        finally:
            self.compute_dtype = previous

    @classmethod
    def from_pretrained(cls, name_or_path: str) -> SegmentEncoder:
        """Weights from a hub id (needs a network or the cache) or a local folder."""
        from transformers import AutoModel

        return cls(AutoModel.from_pretrained(name_or_path))

    @classmethod
    def from_config(cls, config) -> SegmentEncoder:
        """A randomly initialised encoder (tests, or a config saved in a model directory)."""
        from transformers import AutoModel

        from coref_pipeline.models.bert import transformers_config

        return cls(AutoModel.from_config(transformers_config(config)))

    @classmethod
    def for_inference(cls, config) -> SegmentEncoder:
        """The encoder of a saved model to predict with (``CorefModel.load(..., for_prediction=True)``): a BERT
        encoder computed without importing transformers' model stack (:mod:`coref_pipeline.models.bert`, the same
        values), any other as :meth:`from_config`. Its weights are uninitialised until loaded; it refuses training
        mode until :meth:`make_trainable`."""
        from coref_pipeline.models.bert import InferenceBert, computes

        return cls(InferenceBert(config)) if computes(config) else cls.from_config(config)

    def make_trainable(self) -> None:
        """Give an encoder built :meth:`for_inference` back to transformers' own model, holding the same parameter
        objects (an optimiser made before still trains them), on the same device, in the same mode: training needs
        its dropout (and its gradient checkpointing, its CPU attention dropout). The training loop does it first."""
        from coref_pipeline.models.bert import InferenceBert, transformers_config

        if not isinstance(self.model, InferenceBert):
            return
        from transformers import AutoModel

        from coref_pipeline.models.serialization import build_with_weights

        parameters = dict(self.model.named_parameters())
        device = parameters["embeddings.word_embeddings.weight"].device
        config = transformers_config(self.model.config)
        # built as a model directory's encoder is loaded (no random initialisation: the generator untouched)
        model = build_with_weights(lambda: AutoModel.from_config(config), self.model.state_dict())
        for name in dict(model.named_parameters()):
            owner, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(owner), leaf, parameters[name])
        self.model = model.to(device).train(self.training)

    def enable_gradient_checkpointing(self) -> None:
        """Recompute each layer's activations in backward instead of keeping them (HF's own switch):
        less memory for long segments and large encoders, about a third more compute."""
        options = {"use_reentrant": False}
        if hasattr(self.model, "activation_checkpointing_enable"):  # its name from transformers 5.2x
            self.model.activation_checkpointing_enable(activation_checkpointing_kwargs=options)
        else:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=options)

    def use_cpu_attention_dropout(self) -> bool:
        """Train the attention with the cheaper CPU dropout mask of :mod:`coref_pipeline.models.attention`.

        Only an encoder on HF's "sdpa" attention is switched (the default of BERT-family models);
        evaluation and other devices stay on "sdpa" itself, and the switch is not saved with the
        model. True when switched.
        """
        from coref_pipeline.models import attention

        config = self.model.config
        if getattr(config, "_attn_implementation", None) != "sdpa" or not hasattr(
            self.model, "set_attn_implementation"
        ):
            return False
        attention.register()
        self.model.set_attn_implementation(attention.IMPLEMENTATION)
        return config._attn_implementation == attention.IMPLEMENTATION

    @property
    def is_checkpointing(self) -> bool:
        """Whether the encoder recomputes its activations in backward."""
        if hasattr(self.model, "is_activation_checkpointing"):
            return bool(self.model.is_activation_checkpointing)
        return bool(self.model.is_gradient_checkpointing)

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        lengths: Sequence[int] | None = None,
        segments_per_pass: int | None = None,
    ) -> torch.Tensor:
        """``[num_segments, seg_len]`` ids and mask -> ``[num_subtokens, hidden]`` (padding removed).

        ``lengths``: each segment's subtokens, known on the host (``DocumentTensors.segment_lengths``): the
        padding is then cut without reading the mask back (the same values). ``segments_per_pass``: the segments
        one pass of the encoder reads (default ``segment_batch_size``; batched prediction sizes it by its token
        budget).
        """
        per_pass = segments_per_pass or self.segment_batch_size
        with ExitStack() as contexts:
            if input_ids.is_cuda:
                contexts.enter_context(attention_without_cudnn())
            if self.compute_dtype is not None:
                contexts.enter_context(prediction_autocast(input_ids.device, self.compute_dtype))
            hidden = self._encode(input_ids, attention_mask, lengths, per_pass)  # [num_subtokens, hidden]
        return hidden if self.compute_dtype is None else hidden.float()

    def _encode(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, lengths: Sequence[int] | None, per_pass: int
    ) -> torch.Tensor:
        outputs = []
        for first in range(0, input_ids.shape[0], per_pass):
            batch = slice(first, first + per_pass)
            mask = attention_mask[batch]  # [batch, seg_len]
            if lengths is None:
                width = int(mask.sum(dim=1).max())  # padding past the longest segment changes nothing
            else:
                width = max(lengths[batch])
            attention = mask[:, :width]  # [batch, width]
            if lengths is not None and min(lengths[batch]) == width:
                # No padding: no mask, which HF drops anyway once it has read it back to find it all ones.
                attention = None
            hidden = self.model(input_ids=input_ids[batch, :width], attention_mask=attention).last_hidden_state
            if lengths is None:
                outputs.append(hidden[mask[:, :width].bool()])  # [tokens in batch, hidden]
            else:  # each segment's first tokens: slices, no read of the mask
                outputs.extend(hidden[row, :length] for row, length in enumerate(lengths[batch]))
        return torch.cat(outputs, dim=0) if len(outputs) > 1 else outputs[0]


def attention_without_cudnn():
    """PyTorch's attention on a GPU with every kernel but cuDNN's (flash, memory-efficient, math); the
    pretraining objective's encoder runs under it too (its batches are cut to their longest segment as well).

    The batches are cut to their longest segment, so their widths vary from document to document, and cuDNN's
    attention builds an execution plan for every new shape: on an H100, ``spanbert_base`` trained in bf16 at
    5.69 documents/s with it and 9.65 without it (``benchmarks/gpu/gpu.py``).
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])
