"""Fail when dvc.lock does not match the committed code, parameters and results.

For every stage, each dependency and output that git tracks (source files, the
parameter files, the sample corpus, the metrics and charts kept in git) must have
the hash dvc.lock recorded for it; data that DVC caches is not checked (a fresh
clone does not have it). Run from the repository root: `python .ci/check_dvc_lock.py`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def tracked_by_git(root: Path) -> set[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout
    return set(listed.splitlines())


def _is_tracked(path: str, tracked: set[str]) -> bool:
    return path in tracked or any(name.startswith(path.rstrip("/") + "/") for name in tracked)


def stale_entries(root: Path) -> dict[str, list[str]]:
    """Stage -> the git-tracked deps and outs whose content differs from dvc.lock (or the stage is not locked)."""
    try:
        result = subprocess.run(["dvc", "status", "--json"], cwd=root, capture_output=True, text=True)
    except FileNotFoundError:
        raise SystemExit("dvc is not installed here: install the project first (pip install -e .)") from None
    if result.returncode != 0:
        raise SystemExit(f"dvc status failed: {result.stderr.strip()}")
    status = json.loads(result.stdout.strip().splitlines()[-1]) if result.stdout.strip() else {}
    tracked = tracked_by_git(root)
    stale: dict[str, list[str]] = {}
    for stage, entries in status.items():
        for entry in entries:
            if not isinstance(entry, dict):
                stale.setdefault(stage, []).append(str(entry))  # e.g. "changed command"
                continue
            for kind in ("changed deps", "changed outs"):
                for path, change in entry.get(kind, {}).items():
                    if _is_tracked(path, tracked):
                        stale.setdefault(stage, []).append(f"{path} ({json.dumps(change)})")
    return stale


def main() -> int:
    stale = stale_entries(Path.cwd())
    for stage, paths in stale.items():
        print(
            f"dvc.lock is stale for stage {stage!r}: {', '.join(paths)}; "
            f"refresh it with `dvc repro` and commit dvc.lock and data/08_reporting",
            file=sys.stderr,
        )
    if not stale:
        print("dvc.lock matches the committed code, parameters and results")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
