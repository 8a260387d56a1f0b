"""The ``coref_train`` pipeline: jsonlines -> trained baseline, dev predictions and dev metrics."""

from kedro.pipeline import Node, Pipeline

from .nodes import predict_dev, score_dev, train_baseline


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                train_baseline,
                inputs=["segmented_documents", "params:coref_train"],
                outputs="baseline_model",
                name="train_baseline",
            ),
            Node(
                predict_dev,
                inputs=["baseline_model", "segmented_documents", "params:coref_train"],
                outputs="baseline_dev_predictions",
                name="predict_baseline_dev",
            ),
            Node(
                score_dev,
                inputs=["baseline_dev_predictions", "params:coref_train"],
                outputs="baseline_dev_metrics",
                name="score_baseline_dev",
            ),
        ]
    )
