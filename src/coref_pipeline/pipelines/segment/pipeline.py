"""The ``segment`` pipeline: word-level documents -> jsonlines per split and segment length."""

from kedro.pipeline import Node, Pipeline

from .nodes import segment_documents


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                segment_documents,
                inputs=["word_documents_train", "word_documents_dev", "word_documents_test", "params:segment"],
                outputs="segmented_documents",
                name="segment_documents",
            )
        ]
    )
