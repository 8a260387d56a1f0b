"""The ``evaluate`` pipeline: for each model and split, the official metrics and Xia et al.'s breakdown."""

from kedro.pipeline import Node, Pipeline

from .nodes import evaluate, predict_test, score_segment_lengths

MODELS = ("baseline", "incremental")
SPLITS = ("dev", "test")


def create_pipeline(**kwargs) -> Pipeline:
    nodes = []
    for model in MODELS:
        nodes.append(
            Node(
                predict_test,
                inputs=[f"{model}_model", "segmented_documents", "segmentation"],
                outputs=f"{model}_test_predictions",
                name=f"predict_{model}_test",
                tags=[model],
            )
        )
        for split in SPLITS:
            nodes.append(
                Node(
                    evaluate,
                    inputs=[f"{model}_{split}_predictions", f"raw_{split}", "params:evaluate"],
                    outputs=[
                        f"eval_{model}_{split}_response",
                        f"eval_{model}_{split}_metrics",
                        f"eval_{model}_{split}_scores",
                        f"eval_{model}_{split}_documents",
                        f"eval_{model}_{split}_breakdown",
                        f"eval_{model}_{split}_f1_by_length",
                    ],
                    name=f"evaluate_{model}_{split}",
                    tags=[model],
                )
            )
        nodes.append(
            Node(
                score_segment_lengths,
                inputs=[
                    f"{model}_model",
                    "segmented_documents",
                    "segmentation",
                    "raw_dev",
                    "params:evaluate",
                    f"eval_{model}_dev_metrics",
                ],
                outputs=f"eval_{model}_dev_segment_lengths",
                name=f"score_{model}_dev_segment_lengths",
                tags=[model],
            )
        )
    return Pipeline(nodes)
