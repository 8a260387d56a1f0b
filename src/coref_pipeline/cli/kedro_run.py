"""The project's ``kedro run``: Kedro's own command, with a user's error told in one line.

Kedro merges this into ``kedro`` (a project's ``cli.py`` may override a built-in command).
Every option of Kedro's ``run`` is kept. A :class:`~coref_pipeline.errors.UserError`
(a bad file, a bad parameter, a missing prerequisite) or a dataset that cannot be read ends
the run with ``error: <message>`` as the last line and exit code 1; ``--verbose`` shows the
traceback instead. Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

from typing import Any

import click
from kedro.framework.cli.project import run as kedro_builtin_run
from kedro.io import DatasetError

from coref_pipeline.errors import UserError, one_line


def user_error(error: BaseException) -> BaseException | None:
    """The user's error behind ``error`` (following causes), or None for a programming error."""
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        if isinstance(current, UserError):
            return current
        seen.append(current)
        current = current.__cause__ or current.__context__
    return next((e for e in seen if isinstance(e, DatasetError)), None)  # a file Kedro cannot read or write


def _run(ctx: click.Context, verbose: bool, **options: Any) -> None:
    try:
        ctx.invoke(kedro_builtin_run, **options)
    except Exception as error:
        cause = user_error(error)
        if cause is None or verbose:
            raise
        click.echo(f"error: {one_line(cause)}", err=True)
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
