"""The ``evaluate`` pipeline: for each model and split, the official metrics and Xia et al.'s breakdown; every model
on every named test set (``evaluate.test_sets``) and the summary over them (tag ``summary``); each model on the
pronoun probes (``evaluate.probes``); each model's card."""

from kedro.pipeline import Node, Pipeline

from .nodes import (
    evaluate,
    predict_test,
    score_models,
    score_probes,
    score_segment_lengths,
    score_test_sets,
    summarise_test_sets,
    write_model_card,
)

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
        nodes.append(
            Node(
                score_test_sets,
                inputs=[f"{model}_model", f"eval_{model}_test_metrics", "params:evaluate"],
                outputs=f"eval_{model}_test_sets",
                name=f"score_{model}_test_sets",
                tags=[model],
            )
        )
        nodes.append(
            Node(
                score_probes,
                inputs=[f"{model}_model", "params:evaluate"],
                outputs=f"eval_{model}_probes",
                name=f"score_{model}_probes",
                tags=[model],
            )
        )
        nodes.append(
            Node(
                write_model_card,
                inputs=[
                    f"{model}_model",
                    f"eval_{model}_dev_metrics",
                    f"eval_{model}_test_metrics",
                    f"eval_{model}_test_sets",
                    f"eval_{model}_probes",
                    "params:evaluate",
                    "params:model_card",
                ],
                outputs=f"model_card_{model}",
                name=f"write_{model}_model_card",
                tags=[model],
            )
        )
    nodes.append(
        Node(
            score_models,
            inputs=["raw_test", "params:evaluate"],
            outputs="eval_named_models_test_sets",
            name="score_named_models_test_sets",
            tags=["models"],
        )
    )
    nodes.append(
        Node(
            summarise_test_sets,
            inputs=[*(f"eval_{model}_test_sets" for model in MODELS), "eval_named_models_test_sets", "params:evaluate"],
            outputs=["test_sets_summary", "test_sets_summary_markdown", "test_sets_summary_plot", "winobias_summary"],
            name="summarise_test_sets",
            tags=["summary"],
        )
    )
    return Pipeline(nodes)
