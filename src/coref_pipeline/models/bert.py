"""A BERT encoder's forward pass at inference, without transformers' model stack.

``coref-pipeline predict`` spends its first seconds importing: transformers' BERT module alone pulls in
``torch.distributed.tensor`` and transformers' weight-loading machinery, 2.5 s of a command that predicts
LitBank test in some 15 s on a 2-core CPU (docs/benchmarks.md, "Throughput of ``predict`` on a CPU").
:class:`InferenceBert` computes what transformers' ``BertModel`` computes at inference (no dropout, SDPA
attention, the pooler's output), operation for operation in the same order, from the same weights under the same
names: a model directory's ``encoder.model.*`` weights load into either.

A model is loaded with it only to predict (``CorefModel.load(..., for_prediction=True)``: ``predict``, ``serve``,
the spaCy component), and only for the configurations it computes exactly (:func:`computes`: BERT's absolute
positions, exact GELU, an encoder that is not a decoder); every other encoder stays transformers' own. Training
needs dropout: this module refuses training mode, and ``SegmentEncoder.make_trainable`` (which the training loop
calls first) gives the encoder back to transformers' model with the same parameters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

# What this module computes as transformers' BertModel does; any other value of these keys is left to it
# (absolute positions: a configuration may leave the key out, as transformers' own BertConfig does).
COMPUTED_SETTINGS = {
    "model_type": ("bert",),
    "hidden_act": ("gelu",),
    "position_embedding_type": (None, "absolute"),
    "is_decoder": (False,),
    "add_cross_attention": (False,),
    "chunk_size_feed_forward": (0, None),
}


# What InferenceBert reads of a configuration besides COMPUTED_SETTINGS.
READ_SETTINGS = (
    "vocab_size",
    "hidden_size",
    "pad_token_id",
    "max_position_embeddings",
    "type_vocab_size",
    "layer_norm_eps",
    "num_attention_heads",
    "intermediate_size",
    "num_hidden_layers",
)


def computes(config: Any) -> bool:
    """Whether :class:`InferenceBert` computes the encoder of this (transformers) configuration exactly."""
    return all(getattr(config, key, None) in values for key, values in COMPUTED_SETTINGS.items())


class StoredBertConfig:
    """A BERT encoder's ``config.json`` as :class:`InferenceBert` reads it, without importing transformers
    (0.7 s of a ``predict`` command, docs/benchmarks.md). :meth:`read` takes only a file that states every
    setting InferenceBert reads and that it computes; the transformers configuration it stands for is
    :meth:`to_transformers`, which ``save_pretrained`` writes and training builds transformers' model from."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = dict(values)

    @classmethod
    def read(cls, path: str | Path) -> StoredBertConfig | None:
        """The configuration in the JSON file ``path``; None where InferenceBert would need transformers'
        defaults to read it (a key it reads is missing) or does not compute it (:func:`computes`)."""
        try:
            values = json.loads(Path(path).read_text(encoding="utf-8"))
        except ValueError as error:
            raise ValueError(f"{path}: not a JSON configuration ({error})") from None
        explicit = ("model_type", "hidden_act", "is_decoder", "add_cross_attention", *READ_SETTINGS)
        if not isinstance(values, dict) or any(key not in values for key in explicit):
            return None
        config = cls(values)
        return config if computes(config) else None

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def to_transformers(self) -> Any:
        """The transformers configuration of these values (as ``AutoConfig.from_pretrained`` reads the file)."""
        from transformers import CONFIG_MAPPING

        return CONFIG_MAPPING[self._values["model_type"]].from_dict(self._values)

    def save_pretrained(self, folder: str | Path) -> None:
        self.to_transformers().save_pretrained(folder)


def transformers_config(config: Any) -> Any:
    """``config`` as a transformers configuration (a :class:`StoredBertConfig` converted)."""
    return config.to_transformers() if isinstance(config, StoredBertConfig) else config


@dataclass(frozen=True)
class BertOutput:
    """What the segment encoder reads of transformers' output, under the same name."""

    last_hidden_state: torch.Tensor  # [batch, width, hidden]
    pooler_output: torch.Tensor  # [batch, hidden]: tanh of the dense layer on [CLS]


class _Embeddings(nn.Module):
    def __init__(self, config: Any) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        width = input_ids.shape[1]
        positions = torch.arange(width, device=input_ids.device)  # [width]
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings.weight[0]  # [batch, width, hidden]
        embeddings = embeddings + self.position_embeddings(positions)
        return self.LayerNorm(embeddings)


class _SelfAttention(nn.Module):
    def __init__(self, config: Any) -> None:
        super().__init__()
        self.heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | None, packing: Packing | None = None) -> torch.Tensor:
        """``[batch, width, hidden]`` -> the same; or, with ``packing``, the real tokens ``[tokens, hidden]`` -> the
        same (the attention itself on the padded layout, its padding zeros, masked as without packing)."""
        padded = hidden.shape if packing is None else packing.shape_of(hidden)  # [batch, width, hidden]
        shape = (*padded[:-1], self.heads, self.head_size)

        def heads(projected: torch.Tensor) -> torch.Tensor:  # [batch, heads, width, head_size]
            return (projected if packing is None else packing.pad(projected)).view(shape).transpose(1, 2)

        query, key, value = heads(self.query(hidden)), heads(self.key(hidden)), heads(self.value(hidden))
        attended = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=self.head_size**-0.5)
        attended = attended.transpose(1, 2).contiguous()  # [batch, width, heads, head_size]
        attended = attended.reshape(*padded[:-1], -1)  # [batch, width, hidden]
        return attended.contiguous() if packing is None else packing.pack(attended)  # or [tokens, hidden]


class _Residual(nn.Module):
    """A dense layer, then layer normalisation of it added to the residual (BERT's "output" blocks)."""

    def __init__(self, config: Any, inputs: int) -> None:
        super().__init__()
        self.dense = nn.Linear(inputs, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(hidden) + residual)


class _Attention(nn.Module):
    def __init__(self, config: Any) -> None:
        super().__init__()
        self.self = _SelfAttention(config)
        self.output = _Residual(config, config.hidden_size)


class _Intermediate(nn.Module):
    def __init__(self, config: Any) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)


class _Layer(nn.Module):
    def __init__(self, config: Any) -> None:
        super().__init__()
        self.attention = _Attention(config)
        self.intermediate = _Intermediate(config)
        self.output = _Residual(config, config.intermediate_size)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | None, packing: Packing | None = None) -> torch.Tensor:
        """``[batch, width, hidden]`` -> the same; with ``packing``, ``[tokens, hidden]`` -> the same."""
        attended = self.attention.output(self.attention.self(hidden, mask, packing), hidden)  # [..., hidden]
        expanded = F.gelu(self.intermediate.dense(attended))  # [..., intermediate]
        return self.output(expanded, attended)


class _Layers(nn.Module):
    def __init__(self, config: Any) -> None:
        super().__init__()
        self.layer = nn.ModuleList(_Layer(config) for _ in range(config.num_hidden_layers))


class _Pooler(nn.Module):
    def __init__(self, config: Any) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))  # [batch, hidden]


class InferenceBert(nn.Module):
    """transformers' ``BertModel`` at inference, for a configuration :func:`computes` takes.

    ``config`` is the transformers configuration or a :class:`StoredBertConfig` (kept as it is: the model
    directory writes it back).
    """

    def __init__(self, config: Any) -> None:
        super().__init__()
        if not computes(config):
            raise ValueError(f"InferenceBert does not compute a {getattr(config, 'model_type', None)!r} encoder")
        self.config = config
        self.embeddings = _Embeddings(config)
        self.encoder = _Layers(config)
        self.pooler = _Pooler(config)  # as transformers' AutoModel builds a BERT (with its pooling layer)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> BertOutput:
        """``[batch, width]`` ids, and the mask of real tokens (None: no padding) -> ``last_hidden_state``."""
        if self.training:
            raise RuntimeError(
                "InferenceBert computes no dropout: to train a model loaded for_prediction, call "
                "model.encoder.make_trainable() first"
            )
        hidden = self.embeddings(input_ids)  # [batch, width, hidden]
        mask, packing = None, None
        if attention_mask is not None:
            # [batch, 1, width, width]: each query may attend to every real key, as transformers' SDPA mask
            batch, width = attention_mask.shape
            mask = attention_mask.bool()[:, None, None, :].expand(-1, 1, width, -1)
            # The dense layers, layer norms and GELU read the real tokens only, packed: a document's last segment is
            # shorter than the others, and its padding was 12-16% of the products' rows on LitBank test and on
            # OntoNotes-shaped documents (docs/benchmarks.md, "Throughput of `predict`"). Each row is computed as in
            # the padded batch; the attention reads the padded layout, where a padded key never weighs. A mask with
            # no padding in it packs nothing: no copies.
            real = attention_mask.reshape(-1).nonzero().squeeze(1)  # [tokens]
            if real.numel() < batch * width:
                packing = Packing(real, batch, width)
                hidden = packing.pack(hidden)  # [tokens, hidden]
        for layer in self.encoder.layer:
            hidden = layer(hidden, mask, packing)
        if packing is not None:
            hidden = packing.pad(hidden).view(batch, width, -1)  # [batch, width, hidden], zeros where padded
        return BertOutput(hidden, self.pooler(hidden))


class Packing:
    """Where a padded batch's real tokens lie: ``real`` ``[tokens]``, their positions in the flattened ``[batch *
    width]``. ``pack`` keeps their rows, ``pad`` puts rows back in place (zeros elsewhere)."""

    def __init__(self, real: torch.Tensor, batch: int, width: int) -> None:
        self.real, self.batch, self.width = real, batch, width

    def shape_of(self, packed: torch.Tensor) -> torch.Size:
        """The padded shape of packed rows ``[tokens, features]``: ``[batch, width, features]``."""
        return torch.Size((self.batch, self.width, packed.shape[-1]))

    def pack(self, padded: torch.Tensor) -> torch.Tensor:
        """``[batch, width, features]`` -> ``[tokens, features]``."""
        return padded.reshape(self.batch * self.width, -1).index_select(0, self.real)

    def pad(self, packed: torch.Tensor) -> torch.Tensor:
        """``[tokens, features]`` -> ``[batch * width, features]`` (contiguous; view it as ``shape_of``)."""
        padded = packed.new_zeros(self.batch * self.width, packed.shape[-1])
        return padded.index_copy_(0, self.real, packed)
