"""The ``pretrain`` pipeline: the segmented train split -> an encoder continued with SpanBERT's objectives."""

from kedro.pipeline import Node, Pipeline

from .nodes import pretrain


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                pretrain,
                inputs=["segmented_documents", "segmentation", "params:pretrain", "params:model_card"],
                outputs="pretrain_metrics",
                name="pretrain_encoder",
            )
        ]
    )
