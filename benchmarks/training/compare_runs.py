"""Dev learning curves of several `benchmarks/training/baseline.py` runs in one picture, by step and by minutes of
steps.

Run: python benchmarks/training/compare_runs.py --out PNG LABEL=WORK_DIR [LABEL=WORK_DIR ...]

Each WORK_DIR is a ``--work-dir`` of ``benchmarks/training/baseline.py``: its DVCLive dev curve
(``run/dvclive/plots/metrics/dev/conll_f1.tsv``) and its last checkpoint's training seconds and steps
(the minutes axis puts step s at s times the run's mean seconds a step). Runs of one LABEL prefix before
a comma (``full head, seed 13``) share a colour, the first solid.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project root: `benchmarks.common`

import argparse
import json


def curve(work_dir: Path) -> tuple[list[int], list[float], float]:
    """Steps and dev CoNLL F1 of a run, and its mean seconds a step."""
    tsv = work_dir / "run" / "dvclive" / "plots" / "metrics" / "dev" / "conll_f1.tsv"
    if not tsv.is_file():
        raise SystemExit(f"{tsv}: no dev curve (is {work_dir} a benchmarks/training/baseline.py --work-dir?)")
    rows = [line.split("\t") for line in tsv.read_text().splitlines()[1:]]
    checkpoint = sorted((work_dir / "run" / "checkpoints").glob("step-*"))[-1]
    state = json.loads((checkpoint / "state.json").read_text())["train_state"]
    return [int(r[0]) for r in rows], [float(r[1]) for r in rows], state["train_seconds"] / state["global_step"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--title", default="LitBank dev CoNLL F1")
    parser.add_argument("runs", nargs="+", metavar="LABEL=WORK_DIR")
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (by_step, by_minute) = plt.subplots(1, 2, figsize=(11, 4))
    colours: dict[str, str] = {}
    seen: dict[str, int] = {}
    for run in args.runs:
        label, _, directory = run.partition("=")
        steps, f1, seconds = curve(Path(directory))
        group = label.split(",")[0]
        colour = colours.setdefault(group, f"C{len(colours)}")
        seen[group] = seen.get(group, 0) + 1
        style = "-" if seen[group] == 1 else "--"  # a group's first run solid, the others dashed
        by_step.plot(steps, f1, style, color=colour, marker="o", markersize=3, label=label)
        by_minute.plot(
            [s * seconds / 60 for s in steps], f1, style, color=colour, marker="o", markersize=3, label=label
        )
    by_step.set(title=f"{args.title} by step", xlabel="step", ylabel="CoNLL F1")
    by_minute.set(title=f"{args.title} by minutes of steps", xlabel="minutes of training steps", ylabel="CoNLL F1")
    by_minute.legend(fontsize=8)
    figure.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.out, dpi=100)
    plt.close(figure)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
