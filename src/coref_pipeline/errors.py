"""What a user can cause: bad files, bad parameters, missing prerequisites.

Every such error derives from :class:`UserError` and says in one line which file,
line, key or document is at fault and what to do. The command line (``coref-pipeline``
and the project's ``kedro run``) prints it as that one line and exits non-zero;
anything else is a programming error and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """An error in the user's input or set-up (never a bug): reported as one line, without a traceback."""


def one_line(error: BaseException) -> str:
    """The error's message on one line (whitespace folded)."""
    return " ".join(str(error).split())
