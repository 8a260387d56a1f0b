"""Project pipelines, discovered by folder name under ``pipelines/``."""

import importlib
import pkgutil

from kedro.framework.project import find_pipelines
from kedro.pipeline import Pipeline


def register_pipelines() -> dict[str, Pipeline]:
    """Every pipeline under ``pipelines/`` by its folder name; ``__default__`` runs them all."""
    pipelines = find_pipelines()
    pipelines["__default__"] = sum(pipelines.values())
    return pipelines


def every_pipeline() -> dict[str, Pipeline]:
    """Every pipeline under ``pipelines/`` by folder name, whatever a run asked for (Kedro loads only those)."""
    package = importlib.import_module(f"{__package__}.pipelines")
    return {
        module.name: importlib.import_module(f"{package.__name__}.{module.name}.pipeline").create_pipeline()
        for module in pkgutil.iter_modules(package.__path__)
        if module.ispkg
    }
