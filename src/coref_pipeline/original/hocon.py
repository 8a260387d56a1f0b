"""Import an entry of the original HOCON ``experiments.conf`` as a ``coref_train`` preset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coref_pipeline.models.config import BaselineConfig, TrainingConfig

# Keys of the original that name files, clusters or TF details: they have no meaning here.
NOT_IMPORTED = {
    "data_dir", "log_root", "train_path", "eval_path", "conll_eval_path", "conll_test_path", "test_path",
    "bert_config_file", "vocab_file", "tf_checkpoint", "init_checkpoint", "num_docs", "single_example",
    "task_optimizer", "model_type", "lm_path", "lm_layers", "lm_size", "max_seq_length",
}  # fmt: skip

# The released models' encoders, by the name of the experiment.
ENCODERS = {
    "spanbert_large": ("SpanBERT/spanbert-large-cased", "bert-base-cased"),
    "spanbert_base": ("SpanBERT/spanbert-base-cased", "bert-base-cased"),
    "bert_large": ("bert-large-cased", None),
    "bert_base": ("bert-base-cased", None),
}


def _parse_with_placeholders(text: str, attempts: int = 20) -> Any:
    """Parse HOCON; a root-level ``${name}`` that is defined nowhere becomes a placeholder string.

    The released file refers to ``${data_dir}`` outside the object that defines it;
    such references only build file paths, which are not imported.
    """
    import re

    from pyhocon import ConfigFactory
    from pyhocon.exceptions import ConfigSubstitutionException

    placeholders: list[str] = []
    for _ in range(attempts):
        try:
            return ConfigFactory.parse_string("\n".join(placeholders + [text]))
        except ConfigSubstitutionException as error:
            missing = re.search(r"\$\{\??([\w.-]+)\}", str(error))
            if not missing:
                raise
            placeholders.append(f'{missing.group(1)} = "<undefined {missing.group(1)}>"')
    raise ValueError("too many undefined substitutions in the HOCON file")


def experiment_names(path: str | Path) -> list[str]:
    """The entries of an ``experiments.conf`` (``best`` among them), sorted."""
    tree = _parse_with_placeholders(Path(path).read_text(encoding="utf-8"))
    return sorted(key for key in tree.keys() if hasattr(tree[key], "keys"))


def experiment_entry(path: str | Path, name: str) -> dict[str, Any]:
    """Every key of experiment ``name`` (``${best}`` inheritance resolved), as the original reads them."""
    tree = _parse_with_placeholders(Path(path).read_text(encoding="utf-8"))
    if name not in tree:
        raise KeyError(f"{path} has no experiment {name!r}")
    return {key: tree[name][key] for key in tree[name].keys()}


def import_experiment(path: str | Path, name: str) -> tuple[dict[str, Any], list[str]]:
    """The preset for experiment ``name`` (``${best}`` inheritance resolved) and the keys left out."""
    tree = _parse_with_placeholders(Path(path).read_text(encoding="utf-8"))
    if name not in tree:
        experiments = sorted(key for key in tree.keys() if hasattr(tree[key], "keys"))
        raise KeyError(f"{path} has no experiment {name!r}; it has {experiments}")
    entry = tree[name]
    known = set(BaselineConfig.__dataclass_fields__) | set(TrainingConfig.__dataclass_fields__)
    preset: dict[str, Any] = {}
    left_out = []
    for key in sorted(entry.keys()):
        value = entry[key]
        if key in known:
            preset[key] = list(value) if isinstance(value, list) else value
        else:
            left_out.append(key)
    for prefix, (encoder, tokenizer) in ENCODERS.items():
        if name.removeprefix("train_").startswith(prefix):
            preset.setdefault("encoder", encoder)
            if tokenizer:
                preset.setdefault("tokenizer", tokenizer)
            break
    if entry.get("model_type", "independent") != "independent":
        raise ValueError(f"experiment {name!r} is a {entry['model_type']!r} model; only 'independent' is supported")
    BaselineConfig.from_dict({k: v for k, v in preset.items() if k in BaselineConfig.__dataclass_fields__})
    TrainingConfig.from_dict({k: v for k, v in preset.items() if k in TrainingConfig.__dataclass_fields__})
    return preset, left_out


def preset_yaml(name: str, preset: dict[str, Any], left_out: list[str], source: str) -> str:
    """The preset as YAML, ready to paste under ``coref_train.presets`` in parameters_coref_train.yml."""
    import yaml

    header = f"# Imported from {source}, experiment {name!r}.\n"
    if "encoder" not in preset:
        header += "# No encoder could be inferred: set `encoder` (a hub id or a folder).\n"
    if left_out:
        header += f"# Not imported (files, cluster settings or unknown here): {', '.join(left_out)}\n"
    return header + yaml.safe_dump({name: preset}, sort_keys=False)
