"""Files written whole or not at all, and folders one run writes at a time.

Every writer in the project goes through :func:`atomic_path`: the content is
written to a temporary name beside the target and renamed into place, which
POSIX makes atomic on one file system. A write the operating system refuses
(permission, a full disk, a directory in the way) is an :class:`OutputError`
naming the target.

:func:`exclusive_directory` gives one process a folder (a training run's work
directory) for as long as it runs: an OS file lock, released when the process
ends however it ends, so a second run on the same folder is refused at once and a
killed holder's folder is free again.

:class:`ResumableJsonLines` writes a jsonlines file a record at a time, whole or
not at all, and lets the next run of a killed writer go on from its last record.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from coref_pipeline.errors import UserError, output_error

logger = logging.getLogger(__name__)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; renamed onto ``path`` when the block ends without error."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield temporary
        os.replace(temporary, path)
    except OSError as error:
        raise output_error(path, error) from error
    finally:
        if temporary.is_file():
            temporary.unlink()


def record_beside(path: str | Path, kind: str) -> Path:
    """Where a record of ``kind`` about the file ``path`` is kept: ``NAME.KIND.json`` beside it (``NAME`` its stem)."""
    path = Path(path)
    return path.with_name(f"{path.stem}.{kind}.json")


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_path(path) as temporary:
        temporary.write_text(text, encoding="utf-8")


def atomic_write_json(data: Any, path: str | Path) -> None:
    """Write ``data`` as indented JSON with sorted keys to ``path`` atomically."""
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def write_jsonlines(path: str | Path, records: Any) -> None:
    """One JSON object a line, atomically."""
    atomic_write_text(path, "".join(json.dumps(record) + "\n" for record in records))


class JsonLinesError(UserError, ValueError):
    """A jsonlines file that cannot be read; the message names the file and line."""


def read_jsonlines(path: str | Path) -> list[dict[str, Any]]:
    """The JSON objects of a jsonlines file, blank lines skipped; a bad line is an error naming file and line."""
    path = Path(path)
    records = []
    with path.open(encoding="utf-8-sig") as handle:  # a byte-order mark is read as none
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise JsonLinesError(f"{path}:{line_number}: not valid JSON: {error}") from None
    return records


@contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """A fresh temporary folder beside ``path`` to fill; it replaces ``path`` when the block ends without error."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        shutil.rmtree(temporary, ignore_errors=True)
        temporary.mkdir(parents=True)
        yield temporary
        shutil.rmtree(path, ignore_errors=True)
        os.replace(temporary, path)
    except OSError as error:
        raise output_error(path, error) from error
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def make_directory(path: str | Path) -> Path:
    """``path`` and its parents created; a refusal is an :class:`OutputError` naming ``path``."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file where the folder (or one of its parents) should be
        raise output_error(path, NotADirectoryError(errno.ENOTDIR, "Not a directory", str(path))) from None
    except OSError as error:
        raise output_error(path, error) from error
    return path


# A directory a process holds: the OS lock file, and who holds it (pid, host, start, command).
LOCK_FILE = "run.lock"
HOLDER_FILE = "run_holder.json"
_held: dict[str, list[Any]] = {}  # resolved folder -> [the lock, how many blocks of this process hold it]


class DirectoryInUseError(UserError, RuntimeError):
    """A folder another live process holds (:func:`exclusive_directory`); the message names the holder."""


def directory_holder(path: str | Path) -> dict[str, Any]:
    """Who holds (or last held) ``path``: ``pid``, ``host``, ``started`` (UTC), ``command``; {} when unknown."""
    try:
        return json.loads((Path(path) / HOLDER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


@contextmanager
def exclusive_directory(path: str | Path, way_out: str = "") -> Iterator[Path]:
    """Hold the folder ``path`` (created if need be) for this block; refused at once if another process holds it.

    The refusal is a :class:`DirectoryInUseError` naming the folder, the holder's pid, host and
    start time, and ``way_out`` (what to do instead, e.g. another ``work_dir``). The lock is the
    operating system's (``filelock``): it goes with the holding process, so the folder of a killed
    run is taken over by the next. Blocks of one process nest. Code that clears the folder keeps
    :data:`LOCK_FILE` and :data:`HOLDER_FILE`.
    """
    from filelock import FileLock, Timeout

    folder = make_directory(path)
    key = str(folder.resolve())
    if key in _held:
        _held[key][1] += 1
        try:
            yield folder
        finally:
            _held[key][1] -= 1
        return
    lock = FileLock(str(folder / LOCK_FILE), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        holder = directory_holder(folder)
        who = f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}, started {holder.get('started', '?')}"
        raise DirectoryInUseError(
            f"{folder} is in use by another run ({who}): wait for it to end" + (f", or {way_out}" if way_out else "")
        ) from None
    except OSError as error:
        raise output_error(folder / LOCK_FILE, error) from error
    _held[key] = [lock, 1]
    try:
        atomic_write_json(
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                "command": " ".join(sys.argv),
            },
            folder / HOLDER_FILE,
        )
        yield folder
    finally:
        del _held[key]
        lock.release()


def clear_directory(path: str | Path) -> None:
    """Remove everything in ``path`` but the lock that :func:`exclusive_directory` holds there."""
    for entry in Path(path).iterdir():
        if entry.name in (LOCK_FILE, HOLDER_FILE):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except OSError as error:
            raise output_error(entry, error) from error


class OutputInUseError(UserError, RuntimeError):
    """A file another live process is writing (:class:`ResumableJsonLines`)."""


class ResumableJsonLines:
    """A jsonlines file written a record at a time and still whole or not at all, which a killed writer's next run
    goes on writing.

    The records go to ``NAME.partial`` beside ``path``, each flushed as it is written, and :meth:`commit` renames
    that file onto ``path``. Beside the partial file, ``NAME.partial.json`` keeps the settings it is written with
    (what decides its records: the input, the model, the options). A writer opened with the same settings keeps the
    complete records there (:attr:`done`; a record cut short by a kill is dropped) and appends after them; one with
    other settings empties it first. One process writes it at a time: an OS file lock (``NAME.partial.lock``)
    refuses a second at once, and goes with its process however that ends.
    """

    def __init__(self, path: str | Path, settings: dict[str, Any]) -> None:
        self.path = Path(path)
        self.partial = self.path.with_name(f"{self.path.name}.partial")
        self.settings_path = self.path.with_name(f"{self.partial.name}.json")
        self.lock_path = self.path.with_name(f"{self.partial.name}.lock")
        self.settings = json.loads(json.dumps(settings))  # as it reads back: tuples as lists
        self.done = 0  # complete records found in the partial file (its settings the same)
        self.written = 0  # records written by this writer
        self._handle: Any = None
        self._lock: Any = None

    def __enter__(self) -> ResumableJsonLines:
        from filelock import FileLock, Timeout

        make_directory(self.path.parent)
        self._lock = FileLock(str(self.lock_path), timeout=0)
        try:
            self._lock.acquire()
        except Timeout:
            raise OutputInUseError(
                f"{self.path} is being written by another process (it holds {self.lock_path}): "
                "wait for it to end, or write another file"
            ) from None
        except OSError as error:
            raise output_error(self.lock_path, error) from error
        try:
            self.done = self._kept_records()
            self._handle = self.partial.open("a", encoding="utf-8")
        except OSError as error:
            self._lock.release()
            raise output_error(self.partial, error) from error
        except BaseException:
            self._lock.release()
            raise
        return self

    def _kept_records(self) -> int:
        """The complete records of a partial file written with the same settings; else an empty one, and these
        settings beside it (the partial emptied first, so that a kill between the two writes keeps nothing)."""
        try:
            kept = json.loads(self.settings_path.read_text(encoding="utf-8")) if self.partial.is_file() else None
        except (OSError, ValueError):
            kept = None
        if kept == self.settings:
            count, end = 0, 0
            with self.partial.open("rb+") as handle:
                while chunk := handle.read(1 << 20):
                    last = chunk.rfind(b"\n")
                    if last >= 0:
                        count += chunk.count(b"\n")
                        end = handle.tell() - len(chunk) + last + 1
                handle.truncate(end)  # a record cut short by a kill
            return count
        if self.partial.is_file():
            logger.warning("%s was written with other settings: started again", self.partial)
        self.partial.write_bytes(b"")
        atomic_write_json(self.settings, self.settings_path)
        return 0

    def write(self, record: Any) -> None:
        """Append one record, flushed to the operating system (a killed process loses none written)."""
        try:
            self._handle.write(json.dumps(record) + "\n")
            self._handle.flush()
            self.written += 1
        except OSError as error:
            raise output_error(self.partial, error) from error

    def records(self) -> Iterator[dict[str, Any]]:
        """Every record written so far, those kept from a killed run first."""
        self._handle.flush()
        yield from read_jsonlines(self.partial)

    def commit(self) -> None:
        """The partial file renamed onto ``path``; its settings and lock file removed."""
        try:
            self._handle.close()
            os.replace(self.partial, self.path)
            self.settings_path.unlink(missing_ok=True)
            self.lock_path.unlink(missing_ok=True)
        except OSError as error:
            raise output_error(self.path, error) from error

    def __exit__(self, error_type: type[BaseException] | None, *exc: object) -> None:
        if self._handle is not None and not self._handle.closed:
            self._handle.close()
        if error_type is not None and not self.done + self.written:  # nothing to go on from: nothing left behind
            for path in (self.partial, self.settings_path, self.lock_path):
                path.unlink(missing_ok=True)
        self._lock.release()
