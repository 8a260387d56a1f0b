"""Which process of a launch this is, read from the launcher's environment (no torch imported).

Under torchrun or SLURM every rank runs the whole command (``kedro run``, ``dvc repro``); the
project lets rank 0 alone write: the pipeline's outputs (``hooks.RankZeroWritesHook``) and
the training run's work directory, which it holds for the run (``files.exclusive_directory``).
"""

from __future__ import annotations

import os

RANK_VARIABLES = ("RANK", "SLURM_PROCID")  # torchrun's, then SLURM's


def launched_rank() -> int:
    """This process's global rank when torchrun (``RANK``) or SLURM (``SLURM_PROCID``) started it; else 0."""
    for variable in RANK_VARIABLES:
        if os.environ.get(variable, "").isdigit():
            return int(os.environ[variable])
    return 0
