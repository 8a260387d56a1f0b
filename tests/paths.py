"""Paths the tests use."""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = PROJECT_ROOT.parent / "shared"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


SAMPLE_CONF = PROJECT_ROOT / "conf" / "sample"  # the sample corpus as a Kedro environment (`kedro run --env=sample`)


def copy_project(root: Path, with_raw_data: bool = True, corpus: str = "sample") -> Path:
    """The project's configuration, source and (optionally) embedded raw data in ``root``: what `kedro run` needs.

    With ``corpus="sample"`` (the tests' fast corpus) the copy's ``conf/local`` is ``conf/sample``: its runs read the
    sample corpus, as ``kedro run --env=sample`` does here; ``corpus="default"`` keeps the main job's (LitBank).
    Without the raw data the copy still holds the pronoun probes (``data/01_raw/probes``), as every checkout does.
    """
    import shutil

    root.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", ".telemetry"):
        shutil.copy(PROJECT_ROOT / name, root / name)
    shutil.copytree(PROJECT_ROOT / "conf" / "base", root / "conf" / "base")
    if corpus == "sample":
        shutil.copytree(SAMPLE_CONF, root / "conf" / "local")
    elif corpus == "default":
        (root / "conf" / "local").mkdir()
    else:
        raise ValueError(f"corpus {corpus!r}: 'sample' or 'default'")
    shutil.copytree(PROJECT_ROOT / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    if with_raw_data:
        shutil.copytree(PROJECT_ROOT / "data" / "01_raw", root / "data" / "01_raw")
    else:  # the pronoun probes that evaluate asks (evaluate.probes) come with the project whatever the corpus
        shutil.copytree(PROJECT_ROOT / "data" / "01_raw" / "probes", root / "data" / "01_raw" / "probes")
    return root


def use_sample_corpus(root: Path) -> None:
    """Point a copy's ``conf/base`` at the sample corpus (for DVC, which reads ``conf/base`` alone)."""
    import yaml

    base = root / "conf" / "base"
    (base / "globals.yml").write_text((SAMPLE_CONF / "globals.yml").read_text())
    evaluate = base / "parameters_evaluate.yml"
    params = yaml.safe_load(evaluate.read_text())
    params["evaluate"].update(yaml.safe_load((SAMPLE_CONF / "parameters_evaluate.yml").read_text())["evaluate"])
    evaluate.write_text(yaml.safe_dump(params, sort_keys=False))
