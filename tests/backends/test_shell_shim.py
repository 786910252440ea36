"""The shell shim on its own: what it records, and what it refuses to interpret."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from rota.backends.common import exit_info_from_status, is_shim_of, read_status
from rota.backends.shell_shim import MARK, shell_shim_argv, status_from_exit_status

from .conftest import wait_text


def run_shim(tmp: Path, argv: list[str], cwd: str | None = None, *, header: str = "",
             stop: int | None = None) -> tuple[int, dict[str, Any], str]:
    status, log = tmp / "s.json", tmp / "job.log"
    status.unlink(missing_ok=True)
    log.unlink(missing_ok=True)
    proc = subprocess.Popen(shell_shim_argv(status, log, header, cwd, argv),
                            start_new_session=True, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if stop is not None:
        wait_text(log, "ready")
        os.killpg(proc.pid, stop)
    rc = proc.wait(10)
    rec = read_status(status)
    assert rec is not None
    assert rec["shim_pid"] == proc.pid == rec["pgid"]
    return rc, rec, log.read_text()


def test_exit_code_and_end_time_recorded(tmp_path: Path) -> None:
    before = time.time()
    rc, rec, _ = run_shim(tmp_path, ["sh", "-c", "exit 3"])
    assert rc == 3 and (rec["exit_code"], rec["signal"]) == (3, None)
    assert before - 1 <= rec["ended_at"] <= time.time() + 1
    info = exit_info_from_status(rec)
    assert info is not None and info.exit_code == 3


def test_signal_death_is_recorded_as_signal_and_shim_outlives_sigterm(tmp_path: Path) -> None:
    rc, rec, _ = run_shim(tmp_path, ["sh", "-c", "echo ready; sleep 30"],
                          stop=signal.SIGTERM)
    assert (rec["exit_code"], rec["signal"]) == (None, signal.SIGTERM)
    assert rc == 128 + signal.SIGTERM


def test_builtin_and_function_names_are_programs_not_shell_words(tmp_path: Path) -> None:
    """`exit`, `exec` or the shim's own function `end` must not act inside the shim."""
    for argv in (["exit", "0"], ["end", "0"], ["exec", "true"]):
        _, rec, log = run_shim(tmp_path, argv)
        assert rec["exit_code"] == 127, (argv, log)
    _, rec, log = run_shim(tmp_path, ["printf", "%s|", "a b", "$HOME", ";"])
    assert rec["exit_code"] == 0 and log.endswith("a b|$HOME|;|")


def test_missing_program_and_missing_directory(tmp_path: Path) -> None:
    _, rec, log = run_shim(tmp_path, ["rota-no-such-program"])
    assert rec["exit_code"] == 127
    assert "rota: cannot run 'rota-no-such-program': command not found" in log
    _, rec, log = run_shim(tmp_path, ["true"], cwd=str(tmp_path / "gone"))
    assert rec["exit_code"] == 126
    assert "cannot enter the working directory" in log


def test_log_gets_header_then_output_and_an_unwritable_log_is_recorded(tmp_path: Path) -> None:
    _, rec, log = run_shim(tmp_path, ["echo", "hi"], header="=== rota: job 1")
    assert rec["exit_code"] == 0 and log == "=== rota: job 1\nhi\n"
    status, ro = tmp_path / "s2.json", tmp_path / "ro"
    ro.mkdir(mode=0o500)
    proc = subprocess.run(shell_shim_argv(status, ro / "x" / "job.log", "", None, ["true"]),
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=10, check=False)
    rec = read_status(status)
    assert proc.returncode == 126 and rec is not None and rec["exit_code"] == 126


def test_working_directory(tmp_path: Path) -> None:
    _, rec, log = run_shim(tmp_path, ["pwd"], cwd=str(tmp_path))
    assert rec["exit_code"] == 0 and log.strip() == str(tmp_path)


@pytest.mark.parametrize(("status", "expected"), [
    (0, (0, None)), (1, (1, None)), (127, (127, None)), (128, (128, None)),
    (137, (None, 9)), (143, (None, 15)), (192, (None, 64)), (193, (193, None)),
    (255, (255, None))])
def test_status_from_exit_status(status: int, expected: tuple[int | None, int | None]) -> None:
    assert status_from_exit_status(status) == expected


def test_read_status_merges_lines_and_skips_a_torn_one(tmp_path: Path) -> None:
    p = tmp_path / "s.json"
    p.write_text('{"shim_pid": 5, "pgid": 5}\n')
    assert read_status(p) == {"shim_pid": 5, "pgid": 5}
    p.write_text('{"shim_pid": 5, "pgid": 5}\n{"shim_pid": 5, "exit_st')
    assert read_status(p) == {"shim_pid": 5, "pgid": 5}
    p.write_text('{"shim_pid": 5, "pgid": 5}\n{"shim_pid": 5, "exit_status": 137}\n')
    os.utime(p, (1000.0, 1000.0))
    rec = read_status(p)
    assert rec is not None and (rec["exit_code"], rec["signal"], rec["ended_at"]) == \
        (None, 9, 1000.0)


def test_is_shim_of() -> None:
    argv = shell_shim_argv(Path("/h/status/1-1.json"), Path("/h/logs/1.log"), "", None,
                           ["true"])
    assert is_shim_of(argv, "/h/status/1-1.json")
    assert not is_shim_of(argv, "/h/status/1-2.json")
    assert not is_shim_of(["sh", "-c", "x", "/h/status/1-1.json"], "/h/status/1-1.json")
    assert MARK in argv
    assert is_shim_of(["python", "-m", "rota.backends.shim", "--status", "/s"], "/s")
