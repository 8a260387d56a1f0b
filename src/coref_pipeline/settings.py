"""Project settings: https://docs.kedro.org/en/stable/kedro_project_setup/settings.html"""

from kedro.config import OmegaConfigLoader

CONFIG_LOADER_CLASS = OmegaConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    # Without soft merging, `--params a.b=1` or a parameters file in `conf/local`
    # replaces the whole `a` dictionary and silently drops its sibling keys.
    "merge_strategy": {"parameters": "soft"},
}
