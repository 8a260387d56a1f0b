"""The ``preprocess`` pipeline: raw CoNLL-2012 files -> word-level Parquet, per split."""

from kedro.pipeline import Node, Pipeline

from coref_pipeline.formats.corpus import SPLITS

from .nodes import preprocess


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                preprocess,
                inputs=[f"raw_{split}", "params:preprocess"],
                outputs=f"word_documents_{split}",
                name=f"preprocess_{split}",
            )
            for split in SPLITS
        ]
    )
