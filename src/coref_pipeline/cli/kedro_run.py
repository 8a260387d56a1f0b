"""The project's ``kedro run``: Kedro's own command, with a user's error told in one line.

Kedro merges this into ``kedro`` (a project's ``cli.py`` may override a built-in command).
Every option of Kedro's ``run`` is kept. A :class:`~coref_pipeline.errors.UserError`
(a bad file, a bad parameter, a missing prerequisite, a run already using the work
directory), a configuration file that does not parse, a dataset that cannot be read or
written, or a write the operating system refuses ends the run with ``error: <message>`` as
the only line on stderr and exit code 1; ``--verbose`` shows the traceback instead. Any
other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click
import yaml
from kedro.framework.cli.project import run as kedro_builtin_run
from kedro.io import DatasetError

from coref_pipeline.errors import UserError, error_chain, one_line, os_fault

# Kedro's message for a configuration file that YAML cannot read; its cause has the line and column.
_KEDRO_PARSER_MESSAGE = re.compile(r"Invalid YAML or JSON file (?P<path>.+?), unable to read line")


def _relative(path: str) -> str:
    """``path`` relative to the working directory when it lies inside it (as the user wrote it)."""
    try:
        return Path(path).resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path


def _configuration_fault(chain: list[BaseException]) -> str | None:
    """``FILE:LINE:COLUMN: not valid YAML: <problem>`` for a configuration file that does not parse."""
    marked = next((e for e in chain if isinstance(e, yaml.MarkedYAMLError) and e.problem_mark is not None), None)
    if marked is None:
        return None
    path = next((m.group("path") for e in chain if (m := _KEDRO_PARSER_MESSAGE.search(str(e)))), None)
    path = _relative(path or marked.problem_mark.name)
    mark = marked.problem_mark
    return f"{path}:{mark.line + 1}:{mark.column + 1}: not valid YAML: {marked.problem or marked.context}"


def user_error(error: BaseException) -> str | None:
    """The one-line message of the user's error behind ``error`` (following causes), or None for a bug."""
    chain = error_chain(error)
    for current in chain:
        if isinstance(current, UserError):
            return one_line(current)
    configuration = _configuration_fault(chain)
    if configuration is not None:
        return configuration
    dataset = next((e for e in chain if isinstance(e, DatasetError)), None)  # a file Kedro cannot read or write
    for current in chain:
        fault = os_fault(current)
        if fault is not None:
            if isinstance(current, OSError) and current.filename is None and dataset is not None:
                return f"{fault}: {one_line(str(dataset).splitlines()[0])}"  # which dataset it was saving
            return fault
    return None if dataset is None else one_line(dataset)


def _run(ctx: click.Context, verbose: bool, **options: Any) -> None:
    try:
        ctx.invoke(kedro_builtin_run, **options)
    except Exception as error:
        message = user_error(error)
        if message is None or verbose:
            raise
        click.echo(f"error: {message}", err=True)
        ctx.exit(1)


kedro_run = click.Command(
    name="run",
    callback=click.pass_context(_run),
    params=[
        *kedro_builtin_run.params,
        click.Option(["--verbose"], is_flag=True, help="On a user's error, show the traceback too."),
    ],
    help=kedro_builtin_run.help,
    short_help=kedro_builtin_run.short_help,
)
