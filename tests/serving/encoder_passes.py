"""The encoder's passes of a loaded model, counted: what batched prediction's tests read to see documents share one."""

from __future__ import annotations

import pytest

from coref_pipeline.serving.coref_model import CorefModel


def counted_encoder_passes(model: CorefModel, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now until ``monkeypatch`` undoes it, each pass of ``model``'s encoder (of its class) appends the segments
    it read to the returned list."""
    passes: list[int] = []
    encode = type(model.model.encoder).forward

    def counted(self, input_ids, *args, **kwargs):
        passes.append(input_ids.shape[0])
        return encode(self, input_ids, *args, **kwargs)

    monkeypatch.setattr(type(model.model.encoder), "forward", counted)
    return passes
