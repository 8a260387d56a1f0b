"""The ``coref-pipeline`` command: the library's code on any file, one subcommand per module.

``main`` is the console script. Its subcommands live in ``coref_pipeline.cli.<module>``
and are imported only when one runs or the help lists them, so a command loads what
it needs and nothing else (``coref-pipeline score`` never imports torch, transformers
or pandas). ``cli`` is the group Kedro merges into ``kedro`` (a project's
``<package>.cli:cli``); it adds no command.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import logging
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any, NoReturn

import click

from coref_pipeline.errors import UserError, os_fault

LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"
EXIT_USER_ERROR = 2  # bad input, as for a usage error

# Subcommand -> its module in this package; the module defines a click command of that name.
SUBCOMMANDS = {
    "minimize": "minimize",
    "ontonotes": "ontonotes",
    "conll-stats": "conll_stats",
    "predict": "predict",
    "score": "score",
    "import-hocon": "import_hocon",
    "import-tf-checkpoint": "import_tf_checkpoint",
    "import-icoref": "import_icoref",
    "segment-study": "segment_study",
    "serve": "serve",
    "push": "push",
}


def end_process(code: object) -> NoReturn:
    """End the process with ``code`` (as ``sys.exit`` reads it) once what it leaves is done, without the interpreter's
    teardown.

    What a normal exit does that matters is done first, in its order: threading's exit hooks run and the threads
    that are not daemons joined (``threading._shutdown``, what the interpreter calls), the exit handlers run
    (logging's flush and close among them, multiprocessing's children joined), the standard streams flushed. What
    is skipped is the interpreter freeing every module and object and the libraries' C++ destructors: 0.7 s of a
    process that imports torch and this library on a 2-core CPU; ``predict`` takes 0.92-0.94x the time on one to
    30 short documents (docs/benchmarks.md, "Throughput of ``predict`` on a CPU"). A command's outputs are written
    atomically and closed before it returns, so none waits on that teardown.
    """
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): the message on stderr, status 1
        print(code, file=sys.stderr)
        status = 1
    # The interpreter's own first two steps of an exit, in its order: threading's exit hooks (a thread pool's idle
    # workers told to stop: serve's) then every thread that is not a daemon joined; then the exit handlers.
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more to write there
            pass
    os._exit(status)


class CommandError(click.ClickException):
    """Bad input from the user: one line ``error: <message>`` on stderr, exit code 2.

    ``prefix`` goes before ``error:`` (``score`` says ``score: error: ...``). Line
    breaks in the message become spaces, so the error is always one line.
    """

    exit_code = EXIT_USER_ERROR

    def __init__(self, message: object, prefix: str = "") -> None:
        super().__init__(" ".join(str(message).split()))
        self.prefix = prefix

    def show(self, file: Any = None) -> None:
        click.echo(f"{self.prefix}error: {self.message}", file=file, err=file is None)


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use (click's lazy-loading pattern).

    ``lazy_subcommands`` maps a command name to the module (``coref_pipeline.cli.<module>``)
    that defines it as a click command of the same name.
    """

    def __init__(self, *args: Any, lazy_subcommands: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_subcommands = dict(lazy_subcommands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*super().list_commands(ctx), *self.lazy_subcommands]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy_subcommands:
            return super().get_command(ctx, cmd_name)
        module = importlib.import_module(f"{__name__}.{self.lazy_subcommands[cmd_name]}")
        command = getattr(module, self.lazy_subcommands[cmd_name])
        if not isinstance(command, click.Command) or command.name != cmd_name:
            raise TypeError(f"{module.__name__}.{self.lazy_subcommands[cmd_name]} is not the {cmd_name!r} command")
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except UserError as error:  # what the library says is the user's doing, if the command let it through
            raise CommandError(error) from None
        except OSError as error:  # a write the operating system refused: the user's machine, not a bug
            fault = os_fault(error)
            if fault is None:
                raise
            raise CommandError(fault) from None

    def main(self, args: Any = None, prog_name: str | None = None, **kwargs: Any) -> Any:
        """Parse ``args`` (default ``sys.argv[1:]``), run the command and exit with its code (0, or 2 on bad input).

        Run as the process's command (no ``args``: the console script, ``python -m coref_pipeline``), the process
        ends as soon as the command has: :func:`end_process`. Given ``args`` (a caller's own process, a test), it
        exits as click does, raising ``SystemExit``."""
        if args is not None or kwargs:
            return super().main(args, prog_name or self.name, **kwargs)
        try:
            super().main(None, prog_name or self.name)
        except SystemExit as done:
            end_process(done.code)
        end_process(0)


@click.group(name="coref-pipeline", cls=LazyGroup, lazy_subcommands={"run": "kedro_run"})
def cli() -> None:
    """coref-pipeline: run its pipelines with `kedro run --pipelines=NAME`; its own tool is `coref-pipeline`."""
    # Kedro merges a project's ``<package>.cli:cli`` group into ``kedro``: its ``run`` replaces Kedro's
    # with the same command that tells a user's error in one line (``cli/kedro_run.py``).


@click.group(
    name="coref-pipeline",
    cls=LazyGroup,
    lazy_subcommands=SUBCOMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option("-v", "--verbose", is_flag=True, help="log debug messages")
def main(verbose: bool) -> None:
    """The pipelines' code on any file."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format=LOG_FORMAT)
    # The last exit handler to run (they run in reverse, and this one is registered before the command's): where
    # the interpreter's teardown still runs (a command ended by an uncaught exception, ``main`` called with
    # arguments), it then skips the cyclic collection over every object that torch, transformers and a model
    # leave (some 3,000 modules): ``predict`` on LitBank test left the process 1.7 s after its last write
    # without it, 0.4 s with it; run as the process's command, ``end_process`` skips the teardown altogether
    # (docs/benchmarks.md, "Throughput of ``predict`` on a CPU").
    atexit.register(gc.freeze)
