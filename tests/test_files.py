"""Files written whole or not at all, and one process per work directory (coref_pipeline.files)."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from coref_pipeline.errors import OutputError, UserError
from coref_pipeline.files import (
    HOLDER_FILE,
    LOCK_FILE,
    DirectoryInUseError,
    OutputInUseError,
    ResumableJsonLines,
    atomic_write_text,
    clear_directory,
    directory_holder,
    exclusive_directory,
    make_directory,
)

HOLD = textwrap.dedent(
    """
    import sys, time
    from coref_pipeline.files import exclusive_directory
    with exclusive_directory(sys.argv[1]):
        print("held", flush=True)
        time.sleep(600)
    """
)


def holder_process(folder: Path) -> subprocess.Popen:
    """Another process holding ``folder``; returns once it holds it."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_second_process_is_refused_naming_the_folder_the_holder_and_the_way_out(tmp_path):
    folder = tmp_path / "work"
    process = holder_process(folder)
    try:
        with pytest.raises(DirectoryInUseError) as refused:
            with exclusive_directory(folder, "give this run another work_dir"):
                pytest.fail("entered a folder another process holds")
        message = str(refused.value)
        assert isinstance(refused.value, UserError)
        assert str(folder) in message and f"pid {process.pid}" in message, message
        assert time.strftime("%Y-%m-%d", time.gmtime()) in message and "UTC" in message, message
        assert message.endswith("or give this run another work_dir"), message
        assert directory_holder(folder)["pid"] == process.pid  # the refused attempt changed nothing
    finally:
        process.kill()
        process.wait()


def test_the_folder_of_a_killed_holder_is_taken_over(tmp_path):
    folder = tmp_path / "work"
    process = holder_process(folder)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert directory_holder(folder)["pid"] == process.pid  # its record is left behind ...
    with exclusive_directory(folder):  # ... but the lock went with the process
        assert directory_holder(folder)["pid"] == os.getpid()


def test_blocks_of_one_process_nest_and_release_at_the_outermost(tmp_path):
    folder = tmp_path / "work"
    with exclusive_directory(folder):
        with exclusive_directory(folder):
            pass
        # still held after the inner block: another process is refused
        probe = subprocess.run(
            [sys.executable, "-c", HOLD.replace("time.sleep(600)", "pass"), str(folder)], capture_output=True, text=True
        )
        assert probe.returncode != 0 and "DirectoryInUseError" in probe.stderr
    probe = subprocess.run(
        [sys.executable, "-c", HOLD.replace("time.sleep(600)", "pass"), str(folder)], capture_output=True, text=True
    )
    assert probe.returncode == 0, probe.stderr


def test_clearing_a_held_folder_keeps_its_lock(tmp_path):
    folder = tmp_path / "work"
    with exclusive_directory(folder):
        (folder / "checkpoints" / "step-1").mkdir(parents=True)
        (folder / "run_fingerprint.txt").write_text("x")
        clear_directory(folder)
        assert sorted(path.name for path in folder.iterdir()) == sorted([LOCK_FILE, HOLDER_FILE])
        assert json.loads((folder / HOLDER_FILE).read_text())["pid"] == os.getpid()


def test_a_refused_write_names_the_target_and_leaves_the_earlier_file(tmp_path, monkeypatch):
    target = tmp_path / "metrics.json"
    target.write_text("earlier")

    def full_disk(source, destination):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OutputError, match=r"cannot write .*metrics.json: no space left on the device"):
        atomic_write_text(target, "later")
    assert target.read_text() == "earlier"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["metrics.json"]  # no temporary file left


def test_a_file_in_the_way_of_a_folder_is_one_line(tmp_path):
    (tmp_path / "work").write_text("not a folder")
    with pytest.raises(
        OutputError, match=r"cannot write .*work: a file is in the way \(a directory is expected there\)"
    ):
        make_directory(tmp_path / "work")
    with pytest.raises(OutputError, match=r"cannot write .*work/checkpoints: a file is in the way"):
        make_directory(tmp_path / "work" / "checkpoints")


# ------------------------------------------------------------------ a jsonlines output a killed writer goes on with

WRITE_AND_WAIT = textwrap.dedent(
    """
    import sys, time
    from coref_pipeline.files import ResumableJsonLines
    with ResumableJsonLines(sys.argv[1], {"run": 1}) as output:
        output.write({"n": 0})
        print("writing", flush=True)
        time.sleep(600)
    """
)


def leftovers(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def test_records_reach_the_output_whole_at_commit_and_nothing_else_is_left(tmp_path):
    path = tmp_path / "out" / "predicted.jsonl"
    with ResumableJsonLines(path, {"model": "m"}) as output:
        assert output.done == 0
        for number in range(3):
            output.write({"n": number})
        assert not path.exists()  # whole or not at all
        assert list(output.records()) == [{"n": 0}, {"n": 1}, {"n": 2}]
        output.commit()
    assert path.read_text(encoding="utf-8") == "".join(json.dumps({"n": n}) + "\n" for n in range(3))
    assert leftovers(path.parent) == ["predicted.jsonl"]


def test_a_killed_writers_complete_records_are_kept_for_the_same_settings(tmp_path):
    path = tmp_path / "predicted.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-c", WRITE_AND_WAIT, str(path)], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    try:
        assert process.stdout.readline().strip() == "writing"
        with pytest.raises(OutputInUseError, match="is being written by another process"):  # one writer at a time
            with ResumableJsonLines(path, {"run": 1}):
                pytest.fail("opened a file another process writes")
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    with open(f"{path}.partial", "a", encoding="utf-8") as partial:
        partial.write('{"n": 1, "cut sh')  # a record the kill cut short
    with ResumableJsonLines(path, {"run": 1}) as output:
        assert output.done == 1
        output.write({"n": 1})
        output.commit()
    assert read_jsonl(path) == [{"n": 0}, {"n": 1}]
    assert leftovers(tmp_path) == ["predicted.jsonl"]


def test_records_written_with_other_settings_are_not_kept(tmp_path, caplog):
    path = tmp_path / "predicted.jsonl"
    with pytest.raises(KeyboardInterrupt), ResumableJsonLines(path, {"model": "a", "lengths": (1, 2)}) as output:
        output.write({"n": 0})
        raise KeyboardInterrupt  # stopped with a record written: it stays for the next run
    with ResumableJsonLines(path, {"model": "a", "lengths": [1, 2]}) as output:  # the same settings, as JSON reads
        assert output.done == 1
    with ResumableJsonLines(path, {"model": "b", "lengths": [1, 2]}) as output:
        assert output.done == 0 and list(output.records()) == []
        output.commit()
    assert path.read_bytes() == b""
    assert "written with other settings: started again" in caplog.text


def test_a_writer_stopped_before_its_first_record_leaves_nothing(tmp_path):
    path = tmp_path / "predicted.jsonl"
    with pytest.raises(ValueError), ResumableJsonLines(path, {"model": "a"}):
        raise ValueError("the first document is too long")
    assert leftovers(tmp_path) == []


def read_jsonl(path: Path) -> list:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
