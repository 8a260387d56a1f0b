"""Project pipelines, discovered by folder name under ``pipelines/``."""

from kedro.framework.project import find_pipelines
from kedro.pipeline import Pipeline


def register_pipelines() -> dict[str, Pipeline]:
    """Every pipeline under ``pipelines/`` by its folder name; ``__default__`` runs them all."""
    pipelines = find_pipelines()
    pipelines["__default__"] = sum(pipelines.values())
    return pipelines
