"""The ``ontonotes`` pipeline: the release and the CoNLL-2012 skeletons (or the Hub's Parquet) -> the raw
corpus the ``preprocess`` pipeline reads (``corpus`` in conf/base/globals.yml). Run by name only."""

from kedro.pipeline import Node, Pipeline

from coref_pipeline.formats.ontonotes import SPLITS

from .nodes import ontonotes


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                ontonotes,
                inputs="params:ontonotes",
                outputs=[f"raw_{split}" for split in SPLITS],
                name="ontonotes",
            )
        ]
    )
