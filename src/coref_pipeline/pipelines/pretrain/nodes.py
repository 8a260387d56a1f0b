"""Nodes of the ``pretrain`` pipeline: continue an encoder with span masking and the span boundary objective."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coref_pipeline.formats.corpus import SegmentedCorpus
from coref_pipeline.pretraining.run import PretrainParameters, pretrain_encoder, text_documents
from coref_pipeline.sharing.model_card import ModelCardSettings
from coref_pipeline.training import Run


def pretrain(
    segmented: Mapping[str, Any], segmentation: dict[str, Any], params: dict[str, Any], card_params: dict[str, Any]
) -> dict[str, Any]:
    """Pretrain the chosen preset's encoder on the train split (and the plain text named in ``text``); the encoder
    directory, with its card, goes to ``out_dir``, a killed run resumes from ``work_dir``. Returns the held-out
    metrics of the encoder kept."""
    parameters = PretrainParameters.from_dict(params)
    config, training = parameters.settings()
    run = Run(
        parameters.work_dir,
        remove_singletons=False,
        restart=parameters.restart,
        log_params={"preset": parameters.preset},
        work_dir_parameter="pretrain.work_dir",
        description=f"pretrain encoder {parameters.preset}",
    )
    more_text = text_documents(parameters.text, config.encoder, config.max_segment_len)
    corpus = SegmentedCorpus(segmented, segmentation)
    corpus_name = ModelCardSettings.from_dict(card_params).corpus_name
    return pretrain_encoder(corpus, config, training, run, parameters.out_dir, more_text, corpus_name)
