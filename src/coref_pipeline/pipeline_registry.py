"""Project pipelines, discovered by folder name under ``pipelines/``."""

import importlib
import pkgutil

from kedro.framework.project import find_pipelines
from kedro.pipeline import Pipeline

# Run by name only: a plain ``kedro run`` fine-tunes the preset's encoder as it is, and reads the corpus
# conf/base/globals.yml names as it is (``ontonotes`` writes it from OntoNotes when asked).
NOT_IN_DEFAULT = ("pretrain", "ontonotes")


def register_pipelines() -> dict[str, Pipeline]:
    """Every pipeline under ``pipelines/`` by its folder name; ``__default__`` runs them all but ``NOT_IN_DEFAULT``."""
    pipelines = find_pipelines()
    pipelines["__default__"] = sum(pipeline for name, pipeline in pipelines.items() if name not in NOT_IN_DEFAULT)
    return pipelines


def every_pipeline() -> dict[str, Pipeline]:
    """Every pipeline under ``pipelines/`` by folder name, whatever a run asked for (Kedro loads only those)."""
    package = importlib.import_module(f"{__package__}.pipelines")
    return {
        module.name: importlib.import_module(f"{package.__name__}.{module.name}.pipeline").create_pipeline()
        for module in pkgutil.iter_modules(package.__path__)
        if module.ispkg
    }
