"""What a user can cause: bad files, bad parameters, missing prerequisites, a machine that refuses a write.

Every such error derives from :class:`UserError` and says in one line which file,
line, key or document is at fault and what to do. The command line (``coref-pipeline``
and the project's ``kedro run``) prints it as that one line and exits non-zero;
anything else is a programming error and keeps its traceback.

The operating system's refusals (no permission, a full disk, a read-only file system,
a directory where a file should be) are the user's machine, not a bug: :func:`os_fault`
tells them in one line, naming the path.
"""

from __future__ import annotations

import errno
import os

# errno -> what the operating system's refusal means for the user.
OS_FAULTS = {
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOSPC: "no space left on the device (the disk is full)",
    errno.EDQUOT: "the disk quota is exhausted",
    errno.EROFS: "the file system is read-only",
    errno.EISDIR: "a directory is in the way (a file is expected there)",
    errno.ENOTDIR: "a file is in the way (a directory is expected there)",
    errno.ENAMETOOLONG: "the file name is too long",
}


class UserError(Exception):
    """An error in the user's input or set-up (never a bug): reported as one line, without a traceback."""


class OutputError(UserError, OSError):
    """A file or folder that cannot be written: the path and the operating system's reason."""

    def __init__(self, path: object, code: int) -> None:
        super().__init__(code, OS_FAULTS.get(code, "cannot be written"), str(path))

    def __str__(self) -> str:
        return f"cannot write {shown_path(self.filename)}: {self.strerror}"


def shown_path(path: object) -> str:
    """``path`` as a user would write it: relative to the working directory when inside it."""
    text = os.fsdecode(path) if isinstance(path, str | bytes | os.PathLike) else str(path)
    try:
        relative = os.path.relpath(text)
    except ValueError:  # another drive
        return text
    return text if relative.startswith(os.pardir) else relative


def error_chain(error: BaseException) -> list[BaseException]:
    """``error`` and the errors behind it (``__cause__``, else ``__context__``), outermost first."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def os_refusal(error: BaseException) -> OSError | None:
    """The operating-system refusal (:data:`OS_FAULTS`) behind ``error``, if any."""
    return next((e for e in error_chain(error) if isinstance(e, OSError) and e.errno in OS_FAULTS), None)


def one_line(error: BaseException) -> str:
    """The error's message on one line (whitespace folded)."""
    return " ".join(str(error).split())


def os_fault(error: BaseException) -> str | None:
    """One line for an operating-system refusal (:data:`OS_FAULTS`) naming its path, or None for anything else."""
    if not isinstance(error, OSError) or error.errno not in OS_FAULTS:
        return None
    path = error.filename if error.filename is not None else error.filename2
    reason = OS_FAULTS[error.errno]
    return f"{shown_path(path)}: {reason}" if path is not None else reason


def output_error(path: object, error: OSError) -> OSError:
    """``error`` as an :class:`OutputError` naming ``path`` when it is an operating-system refusal, else itself."""
    if isinstance(error, UserError) or error.errno not in OS_FAULTS:
        return error
    return OutputError(path, error.errno)
