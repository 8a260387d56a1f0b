"""The ``incremental_train`` pipeline: trained baseline + jsonlines -> incremental model, dev predictions, metrics."""

from kedro.pipeline import Node, Pipeline

from .nodes import predict_incremental_dev, score_incremental_dev, train_incremental


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                train_incremental,
                inputs=["baseline_model", "segmented_documents", "params:incremental_train"],
                outputs="incremental_model",
                name="train_incremental",
            ),
            Node(
                predict_incremental_dev,
                inputs=["incremental_model", "segmented_documents", "params:incremental_train"],
                outputs="incremental_dev_predictions",
                name="predict_incremental_dev",
            ),
            Node(
                score_incremental_dev,
                inputs=["incremental_dev_predictions", "params:incremental_train"],
                outputs="incremental_dev_metrics",
                name="score_incremental_dev",
            ),
        ]
    )
