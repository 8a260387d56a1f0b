"""Run ``kedro`` with the operating system refusing writes under one folder: the tests' stand-in for a
folder without write permission and for a full disk, which a test (often run as root, in a folder
it owns) cannot make::

    python tests/os_refusal.py ERRNO FOLDER [kedro arguments ...]

ERRNO 13 (EACCES): creating, opening for writing, making folders and renaming into FOLDER are refused,
as a folder without write permission refuses them. ERRNO 28 (ENOSPC): a file under FOLDER opens (and
is truncated or created) and its first write fails, as on a full disk.
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import sys

WRITING_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def main() -> None:
    code, folder, *arguments = sys.argv[1:]
    code, folder = int(code), os.path.abspath(folder)
    real_open, real_os_open, real_mkdir, real_replace = builtins.open, os.open, os.mkdir, os.replace

    def inside(path: object) -> bool:
        try:
            absolute = os.path.abspath(os.fsdecode(path))
        except TypeError:  # a file descriptor
            return False
        return absolute == folder or absolute.startswith(folder + os.sep)

    def refuse(path: object) -> None:
        if code == errno.ENOSPC:
            raise OSError(code, os.strerror(code))  # a failed write names no file
        raise OSError(code, os.strerror(code), os.fsdecode(path))

    def patched_open(file, mode="r", *args, **kwargs):
        if inside(file) and any(flag in mode for flag in "wax+"):
            if code == errno.ENOSPC:
                real_open(file, mode, *args, **kwargs).close()  # opened, truncated: then the disk is full
            refuse(file)
        return real_open(file, mode, *args, **kwargs)

    def patched_os_open(path, flags, *args, **kwargs):
        if inside(path) and flags & WRITING_FLAGS:
            if code == errno.ENOSPC:
                os.close(real_os_open(path, flags, *args, **kwargs))
            refuse(path)
        return real_os_open(path, flags, *args, **kwargs)

    def patched_mkdir(path, *args, **kwargs):
        if inside(path) and code != errno.ENOSPC:
            refuse(path)
        return real_mkdir(path, *args, **kwargs)

    def patched_replace(source, target, *args, **kwargs):
        if inside(target) and code != errno.ENOSPC:
            refuse(target)
        return real_replace(source, target, *args, **kwargs)

    builtins.open = io.open = patched_open
    os.open, os.mkdir, os.replace = patched_os_open, patched_mkdir, patched_replace

    from kedro.framework.cli import main as kedro_main

    sys.argv = ["kedro", *arguments]
    kedro_main()


if __name__ == "__main__":
    main()
