"""Paths the tests use."""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = PROJECT_ROOT.parent / "shared"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def copy_project(root: Path, with_raw_data: bool = True) -> Path:
    """The project's configuration, source and (optionally) embedded raw data in ``root``: what `kedro run` needs."""
    import shutil

    root.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", ".telemetry"):
        shutil.copy(PROJECT_ROOT / name, root / name)
    shutil.copytree(PROJECT_ROOT / "conf" / "base", root / "conf" / "base")
    (root / "conf" / "local").mkdir()
    shutil.copytree(PROJECT_ROOT / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    if with_raw_data:
        shutil.copytree(PROJECT_ROOT / "data" / "01_raw", root / "data" / "01_raw")
    return root
