"""The ``incremental_train`` pipeline: trained baseline + jsonlines -> incremental model, dev predictions, metrics."""

from kedro.pipeline import Node, Pipeline

from ..dev_scores import DEV_KEY, SCORING, dev_score_nodes
from .nodes import train


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                train,
                inputs=[
                    "baseline_model",
                    "segmented_documents",
                    "segmentation",
                    "params:incremental_train",
                    DEV_KEY,
                    SCORING,
                ],
                outputs="incremental_model",
                name="train_incremental",
            ),
            *dev_score_nodes("incremental"),
        ]
    )
