"""`rota logs` against a real daemon: a job's terminal control sequences are shown escaped
unless --raw, and a log of any size is streamed through in bounded memory."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rota_testing import DaemonProcess, running_daemon

#: sets the window title, clears the screen, then a line and a progress bar's redraw
NASTY = "\x1b]0;TITLE\x07\x1b[2Jhello\tworld\nstep 1\rstep 2\n"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with running_daemon(tmp_path_factory.mktemp("logs-escape")) as d:
        yield d


def ended_job(d: DaemonProcess, code: str) -> int:
    job = d.submit("--gpus", "0", "--", sys.executable, "-c", code)
    r = d.cli("wait", str(job), "--timeout", "60")
    assert r.returncode == 0, r.stdout + r.stderr
    return job


def logs(d: DaemonProcess, *args: str) -> bytes:
    """What `rota logs ARGS` writes, byte for byte (text mode would turn \\r into \\n)."""
    r = subprocess.run([sys.executable, "-m", "rota", "logs", *args], env=d.env,
                       capture_output=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_control_sequences_are_escaped_unless_raw(daemon: DaemonProcess) -> None:
    job = ended_job(daemon, f"import sys; sys.stdout.write({NASTY!r})")
    shown = logs(daemon, str(job))
    assert b"\x1b" not in shown and b"\x07" not in shown
    assert b"\\x1b]0;TITLE\\x07\\x1b[2Jhello\tworld\nstep 1\rstep 2\n" in shown
    assert NASTY.encode() in logs(daemon, str(job), "--raw")
    followed = logs(daemon, str(job), "-f")
    assert b"\x1b" not in followed and b"\\x1b[2Jhello" in followed


def test_a_huge_single_line_log_is_streamed_in_bounded_memory(daemon: DaemonProcess) -> None:
    job = ended_job(daemon, "print('started')")
    size = 200 << 20
    log = daemon.home / "logs" / f"{job}.log"
    with open(log, "ab") as f:  # one 200 MB line, as a job might print (written here: fast)
        f.write(b"a" * size)
    # the CLI's peak memory (as a child of this short Python, whose own is a few MB)
    probe = ("import resource, subprocess, sys\n"
             "r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n"
             "assert r.returncode == 0, r.stderr\n"
             "print(len(r.stdout), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    out = subprocess.run([sys.executable, "-c", probe, sys.executable, "-m", "rota", "logs",
                          str(job)], env=daemon.env, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    printed, peak_kib = map(int, out.stdout.split())
    assert printed >= size
    assert peak_kib < (size >> 10) // 2, f"rota logs held {peak_kib >> 10} MiB at its peak"


def test_a_json_answer_is_the_whole_log_too(daemon: DaemonProcess) -> None:
    import json

    job = ended_job(daemon, f"import sys; sys.stdout.write({NASTY!r})")
    got = json.loads(daemon.cli("logs", str(job), "--json").stdout)
    assert got["id"] == job and got["data"].endswith(NASTY) and got["next"] > got["offset"]


def test_the_memory_probe_would_see_a_whole_log_held(tmp_path: Path) -> None:
    """The probe above measures what it should: a child that holds 100 MB shows it."""
    out = subprocess.run([sys.executable, "-c",
                          "import resource, subprocess, sys\n"
                          "subprocess.run([sys.executable, '-c', 'x = b\"a\" * (100 << 20)'])\n"
                          "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"],
                         capture_output=True, text=True, check=True)
    assert int(out.stdout) > 100 << 10
