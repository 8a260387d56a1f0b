"""Project settings: https://docs.kedro.org/en/stable/kedro_project_setup/settings.html"""

from kedro.config import OmegaConfigLoader

from coref_pipeline.hooks import PrerequisitesHook, RankZeroWritesHook, TestSetsHook

# A run whose inputs are missing (e.g. `evaluate` before `incremental_train`) says what to run first;
# a run that scores the named test sets reads them all before any model runs;
# under torchrun or SLURM only rank 0 saves the pipeline's outputs.
HOOKS = (PrerequisitesHook(), TestSetsHook(), RankZeroWritesHook())

CONFIG_LOADER_CLASS = OmegaConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    # Without soft merging, `--params a.b=1` or a parameters file in `conf/local`
    # replaces the whole `a` dictionary and silently drops its sibling keys.
    "merge_strategy": {"parameters": "soft"},
}

# kedro-viz's run hooks record run events for its UI only on full, sequential runs and warn
# "Workflow tracking disabled" on every partial run (`--pipelines=...`, as here and in every
# DVC stage). `kedro viz run` / `kedro viz build` do not need them.
DISABLE_HOOKS_FOR_PLUGINS = ("kedro-viz",)
