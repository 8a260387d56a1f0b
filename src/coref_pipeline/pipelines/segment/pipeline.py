"""The ``segment`` pipeline: word-level documents -> jsonlines per split and segment length, and their record."""

from kedro.pipeline import Node, Pipeline

from .nodes import segment


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                segment,
                inputs=[
                    "word_documents_train",
                    "word_documents_dev",
                    "word_documents_test",
                    "params:segment",
                    "params:coref_train",
                ],
                outputs=["segmented_documents", "segmentation"],
                name="segment_documents",
            )
        ]
    )
