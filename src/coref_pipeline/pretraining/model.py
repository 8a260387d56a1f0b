"""An encoder with SpanBERT's two heads: the masked-LM loss plus, optionally, the span boundary objective.

``loss = L_MLM + L_SBO`` (Joshi et al. 2020, section 3.2), each the mean cross-entropy over the predicted
subtokens, both decoding through the encoder's input embedding matrix. The masked-LM head of an encoder that
was saved with one (BERT's ``cls.predictions``, RoBERTa's ``lm_head``) starts from its weights; one without it
(a sentence-embedding model such as the packaged MiniLM) starts with a new transform and a zero bias, its
decoder the (trained) embedding matrix. The span boundary head always starts new.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.nn import functional as nn_functional

from coref_pipeline.evaluation.metrics import sum_in_order
from coref_pipeline.models.encoder import attention_without_cudnn
from coref_pipeline.pretraining.data import MaskedBatch
from coref_pipeline.pretraining.heads import MaskedLMHead, SpanBoundaryHead
from coref_pipeline.pretraining.masking import IGNORE_INDEX

logger = logging.getLogger(__name__)

# A saved masked-LM head's tensors -> this module's MaskedLMHead (BERT's names, then RoBERTa's).
_SAVED_HEADS = (
    {
        "cls.predictions.transform.dense.weight": "transform.dense.weight",
        "cls.predictions.transform.dense.bias": "transform.dense.bias",
        "cls.predictions.transform.LayerNorm.weight": "transform.LayerNorm.weight",
        "cls.predictions.transform.LayerNorm.bias": "transform.LayerNorm.bias",
        "cls.predictions.bias": "decoder.bias",
    },
    {
        "lm_head.dense.weight": "transform.dense.weight",
        "lm_head.dense.bias": "transform.dense.bias",
        "lm_head.layer_norm.weight": "transform.LayerNorm.weight",
        "lm_head.layer_norm.bias": "transform.LayerNorm.bias",
        "lm_head.bias": "decoder.bias",
    },
)


class SpanBertPretrainer(nn.Module):
    """``encoder`` (a Hugging Face base model) with the masked-LM head and, with ``sbo``, the span boundary head."""

    def __init__(self, encoder: nn.Module, sbo: bool, max_span_subtokens: int) -> None:
        super().__init__()
        config = encoder.config
        embeddings = encoder.get_input_embeddings()
        eps = getattr(config, "layer_norm_eps", 1e-12)
        self.encoder = encoder
        self.mlm = MaskedLMHead(embeddings, config.hidden_size, eps)
        self.sbo = SpanBoundaryHead(embeddings, config.hidden_size, max_span_subtokens, eps) if sbo else None
        self._running = torch.zeros(5, dtype=torch.float64)  # MLM loss, SBO loss, correct, predicted, batches

    def heads(self) -> nn.ModuleDict:
        """The pretraining heads (without the tied embedding matrix, which is the encoder's)."""
        return nn.ModuleDict({"mlm": self.mlm, **({"sbo": self.sbo} if self.sbo is not None else {})})

    def load_saved_head(self, tensors: dict[str, torch.Tensor]) -> bool:
        """Take the masked-LM head's weights from a saved model's ``tensors`` (BERT's or RoBERTa's names);
        False (nothing changed) when they are not all there."""
        for names in _SAVED_HEADS:
            if all(name in tensors for name in names):
                self.mlm.load_state_dict({ours: tensors[theirs] for theirs, ours in names.items()})
                return True
        return False

    def losses(self, batch: MaskedBatch) -> dict[str, torch.Tensor]:
        """``loss`` (MLM + SBO), ``mlm_loss``, ``sbo_loss`` (0 without SBO), ``correct`` and ``predicted``
        (the masked-LM head's right guesses among the predicted subtokens)."""
        device = next(self.parameters()).device
        batch = batch.to(device)
        with attention_without_cudnn() if device.type == "cuda" else contextlib.nullcontext():
            hidden = self.encoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
        hidden = hidden.reshape(-1, hidden.shape[-1])  # [B * L, H]
        labels = batch.labels.reshape(-1)  # [B * L]
        predicted = (labels != IGNORE_INDEX).nonzero().squeeze(1)  # [m]
        logits = self.mlm(hidden[predicted]).float()  # [m, V]
        mlm_loss = nn_functional.cross_entropy(logits, labels[predicted])
        sbo_loss = hidden.new_zeros((), dtype=torch.float32)
        if self.sbo is not None and batch.targets.position.numel():
            sbo_logits = self.sbo(hidden, batch.targets).float()  # [t, V]
            sbo_loss = nn_functional.cross_entropy(sbo_logits, labels[batch.targets.position])
        correct = (logits.argmax(dim=-1) == labels[predicted]).sum()
        return {
            "loss": mlm_loss + sbo_loss,
            "mlm_loss": mlm_loss,
            "sbo_loss": sbo_loss,
            "correct": correct,
            "predicted": torch.tensor(predicted.numel(), device=device),
        }

    def training_losses(self, batch: MaskedBatch) -> Iterator[torch.Tensor]:
        """The one loss of a step (what ``training_step`` backpropagates); its parts are kept for ``report``."""
        parts = self.losses(batch)
        kept = torch.stack([parts[name].detach().float() for name in ("mlm_loss", "sbo_loss", "correct", "predicted")])
        self._running += torch.tensor([*kept.tolist(), 1.0], dtype=torch.float64)  # one copy from the device
        yield parts["loss"]

    def report(self) -> dict[str, float]:
        """Since the last report: the mean MLM and SBO losses and the masked-token accuracy (percent)."""
        mlm, sbo, correct, predicted, batches = self._running.tolist()
        self._running.zero_()
        statistics = {"mlm": mlm / max(batches, 1), "acc": 100 * correct / max(predicted, 1)}
        if self.sbo is not None:
            statistics["sbo"] = sbo / max(batches, 1)
        return statistics


def summary(parts: list[dict[str, Any]]) -> dict[str, float]:
    """Held-out metrics over batches' ``losses``: mean losses by batch, masked-token accuracy in percent."""
    count = max(len(parts), 1)
    correct = sum_in_order(float(part["correct"]) for part in parts)
    predicted = sum_in_order(float(part["predicted"]) for part in parts)
    return {
        "loss": sum_in_order(float(part["loss"]) for part in parts) / count,
        "mlm_loss": sum_in_order(float(part["mlm_loss"]) for part in parts) / count,
        "sbo_loss": sum_in_order(float(part["sbo_loss"]) for part in parts) / count,
        "accuracy": 100 * correct / max(predicted, 1),
    }
