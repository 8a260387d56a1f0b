"""The ``coref_train`` pipeline: jsonlines -> trained baseline, dev predictions and dev metrics."""

from kedro.pipeline import Node, Pipeline

from ..dev_scores import DEV_KEY, SCORING, dev_score_nodes
from .nodes import train


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                train,
                inputs=["segmented_documents", "segmentation", "params:coref_train", DEV_KEY, SCORING],
                outputs="baseline_model",
                name="train_baseline",
            ),
            *dev_score_nodes("baseline"),
        ]
    )
