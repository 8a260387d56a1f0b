"""``coref-pipeline segment-study``: Xia et al.'s segment-length study as a DVC experiment grid."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from pathlib import Path

import click

from coref_pipeline.cli import CommandError

logger = logging.getLogger(__name__)

PARAMETERS = Path("conf/base/parameters_coref_train.yml")
DEFAULT_LENGTHS = "128,256,384,512,1sent,5sent,10sent"


@click.group(
    "segment-study",
    short_help="Xia et al.'s segment-length study (DVC experiments)",
    help=(
        "Train at each segment length and score dev at each (Xia et al. 2020, Table 4), as DVC "
        "experiments: `queue` queues one experiment per training length, `dvc queue start` runs them, "
        "`table` prints the table (rows: training length, columns: inference length, cells: dev CoNLL F1) "
        "and draws it as a heat map. Lengths: subtokens (128) or sentences (5sent). Run from the project folder."
    ),
)
def segment_study() -> None:
    pass


def _split(lengths: str) -> list[str]:
    return [item.strip() for item in lengths.split(",") if item.strip()]


@segment_study.command("queue", help="Queue one `dvc exp run` per training length; then run `dvc queue start`.")
@click.option("--model", type=click.Choice(["incremental", "baseline"]), default="incremental", show_default=True)
@click.option("--train-lengths", default=DEFAULT_LENGTHS, show_default=True, help="training segment lengths")
@click.option("--eval-lengths", default=DEFAULT_LENGTHS, show_default=True, help="inference segment lengths")
@click.option(
    "-S",
    "--set",
    "settings",
    multiple=True,
    metavar="FILE:KEY=VALUE",
    help="another `dvc exp run -S` setting for every experiment (a budget, a corpus), e.g. "
    "conf/base/parameters_incremental_train.yml:incremental_train.overrides.max_steps=20",
)
@click.option("--dry-run", is_flag=True, help="print the commands, queue nothing")
def queue(model: str, train_lengths: str, eval_lengths: str, settings: tuple[str, ...], dry_run: bool) -> None:
    import yaml

    from coref_pipeline.config_base import ConfigError
    from coref_pipeline.models.config import CorefTrainParameters
    from coref_pipeline.studies.segment_study import grid_commands

    if not PARAMETERS.is_file():
        raise CommandError(f"{PARAMETERS} not found: run segment-study from the project folder")
    try:
        parameters = yaml.safe_load(PARAMETERS.read_text(encoding="utf-8"))["coref_train"]
        baseline, _ = CorefTrainParameters.from_dict(parameters).settings()
        commands = grid_commands(model, _split(train_lengths), _split(eval_lengths), baseline.segment_length, settings)
    except (ConfigError, ValueError, KeyError) as error:
        raise CommandError(error) from None
    for command in commands:
        click.echo(" ".join(command))
        if not dry_run:
            try:
                subprocess.run(command, check=True)
            except FileNotFoundError:
                raise CommandError("dvc is not installed (pip install dvc)") from None
            except subprocess.CalledProcessError as error:
                raise CommandError(f"`{' '.join(command)}` failed (exit code {error.returncode})") from None
    if not dry_run:
        click.echo(
            f"Queued {len(commands)} experiments. Run them one at a time with `dvc queue start -j 1` "
            "(follow with `dvc queue status`), then: coref-pipeline segment-study table"
        )


@segment_study.command("table", help="Print the study's table and write it, with its heat map, to --out-dir.")
@click.option("--model", type=click.Choice(["incremental", "baseline"]), default="incremental", show_default=True)
@click.option("--out-dir", default="data/08_reporting", show_default=True, type=click.Path(file_okay=False))
@click.option(
    "--copy-to", type=click.Path(file_okay=False), help="also copy the table and the PNG here (e.g. docs/images)"
)
@click.option(
    "--from-json",
    type=click.Path(exists=True, dir_okay=False),
    help="read saved `dvc exp show --json` output instead of running it",
)
def table(model: str, out_dir: str, copy_to: str | None, from_json: str | None) -> None:
    from coref_pipeline.studies.segment_study import markdown_table, plot_table, study_rows, study_table, table_paths

    if from_json:
        text = Path(from_json).read_text(encoding="utf-8")
    else:
        try:
            done = subprocess.run(["dvc", "exp", "show", "--json"], check=True, capture_output=True, text=True)
        except FileNotFoundError:
            raise CommandError("dvc is not installed (pip install dvc)") from None
        except subprocess.CalledProcessError as error:
            raise CommandError(f"`dvc exp show --json` failed: {error.stderr.strip()}") from None
        text = done.stdout

    def read(rev: str, path: str) -> str | None:
        shown = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True)
        return shown.stdout if shown.returncode == 0 else None

    try:
        rows = study_rows(json.loads(text), model, read)
        found = study_table(rows)
    except ValueError as error:
        raise CommandError(f"{error}: queue them with `coref-pipeline segment-study queue`") from None
    markdown = markdown_table(found)
    click.echo(markdown)
    table_path, plot_path = table_paths(model, out_dir)
    table_path.parent.mkdir(parents=True, exist_ok=True)
    table_path.write_text(markdown + "\n", encoding="utf-8")
    plot_table(found, plot_path, f"{model}: dev CoNLL F1 by training and inference segment length")
    written = [table_path, plot_path]
    if copy_to:
        Path(copy_to).mkdir(parents=True, exist_ok=True)
        written += [Path(shutil.copy(path, Path(copy_to) / path.name)) for path in (table_path, plot_path)]
    click.echo("Wrote " + ", ".join(str(path) for path in written))
