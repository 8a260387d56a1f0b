"""Training: one loop and one training step (``loop``), optimisers (``optim``), checkpoints and run identity
(``checkpoints``), devices, processes and precision (``engine``), and a recipe per model (``baseline``,
``incremental``).

The entry points a user, the CLI, a benchmark and the Kedro nodes call::

    from coref_pipeline.training import train_baseline, train_incremental
"""

from coref_pipeline.training.baseline import (
    baseline_from,
    baseline_recipe,
    build_baseline,
    take_baseline,
    train_baseline,
)
from coref_pipeline.training.incremental import (
    build_incremental,
    continued_incremental,
    continued_settings,
    incremental_recipe,
    incremental_settings,
    train_incremental,
)
from coref_pipeline.training.loop import Recipe, Run, TrainingCallback, fit, seed_everything

__all__ = [
    "Recipe",
    "Run",
    "TrainingCallback",
    "baseline_from",
    "baseline_recipe",
    "build_baseline",
    "build_incremental",
    "continued_incremental",
    "continued_settings",
    "fit",
    "incremental_recipe",
    "incremental_settings",
    "seed_everything",
    "take_baseline",
    "train_baseline",
    "train_incremental",
]
