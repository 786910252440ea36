"""The shim on its own, and the helpers in rota.backends.common."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rota.backends.base import ExitInfo, LaunchRequest
from rota.backends.common import (
    KILLED,
    build_job_argv,
    exit_info_from_status,
    pid_alive,
    read_status,
    reap,
    shim_argv,
    signal_group,
    write_job_file,
)
from rota.errors import BackendError
from rota_testing import patience

from .conftest import PY, py, wait_for, wait_text

SHIM = [PY, "-m", "rota.backends.shim"]


class Shim:
    """A shim started the way the local backend starts it: own session, output to a log."""

    def __init__(self, tmp: Path, argv: list[str], *, tee: bool = False,
                 job_file: Path | None = None) -> None:
        self.status = tmp / "status.json"
        self.log = tmp / "job.log"
        self.tee_out = tmp / "shim-stdout"
        cmd = [*SHIM, "--status", str(self.status)]
        if tee:
            cmd += ["--tee", str(self.log)]
        cmd += ["--job-file", str(job_file)] if job_file else ["--", *argv]
        with open(self.tee_out if tee else self.log, "ab") as out:
            self.proc = subprocess.Popen(cmd, start_new_session=True, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=out)

    def record(self) -> dict[str, Any]:
        got: dict[str, Any] = wait_for(lambda: read_status(self.status), what="a status file")
        return got

    def wait(self, timeout: float = 10.0) -> int:
        return self.proc.wait(patience(timeout))

    def end_record(self) -> dict[str, Any]:
        self.wait()
        rec = read_status(self.status)
        assert rec is not None and rec["ended_at"] is not None
        return rec

    def kill(self) -> None:
        if self.proc.poll() is None:
            signal_group(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def shims() -> Any:
    started: list[Shim] = []
    yield started
    for s in started:
        s.kill()


def start(shims: list[Shim], tmp: Path, argv: list[str], **kw: Any) -> Shim:
    s = Shim(tmp, argv, **kw)
    shims.append(s)
    return s


WAIT_GO = "import os, sys, time\nprint('ready', flush=True)\n" \
          "while not os.path.exists(sys.argv[1]): time.sleep(0.02)\nsys.exit(int(sys.argv[2]))"


def test_start_record_then_end_record(tmp_path: Path, shims: list[Shim]) -> None:
    go = tmp_path / "go"
    s = start(shims, tmp_path, py(WAIT_GO, str(go), "5"))
    rec = s.record()
    assert rec["shim_pid"] == s.proc.pid == rec["pgid"]
    assert rec["child_pid"] and rec["child_pid"] != rec["shim_pid"]
    assert os.getpgid(rec["child_pid"]) == s.proc.pid
    assert "exit_code" not in rec and "ended_at" not in rec
    assert exit_info_from_status(rec) is None
    go.touch()
    assert s.wait() == 5
    end = s.end_record()
    assert end["exit_code"] == 5 and end["signal"] is None
    assert end["ended_at"] >= end["started_at"] == rec["started_at"]
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_shim_survives_signals_to_itself(tmp_path: Path, shims: list[Shim],
                                         sig: signal.Signals) -> None:
    """Only the job decides to stop; the shim stays to record what the job did."""
    go = tmp_path / "go"
    s = start(shims, tmp_path, py(WAIT_GO, str(go), "0"))
    wait_text(s.log, "ready")
    os.kill(s.proc.pid, sig)
    os.kill(s.proc.pid, sig)
    assert s.proc.poll() is None
    go.touch()
    assert s.wait() == 0
    assert s.end_record()["exit_code"] == 0


def test_sigterm_to_group_exits_128_plus_signal(tmp_path: Path, shims: list[Shim]) -> None:
    s = start(shims, tmp_path, py("import time; print('ready', flush=True); time.sleep(60)"))
    wait_text(s.log, "ready")
    os.killpg(s.proc.pid, signal.SIGTERM)
    assert s.wait() == 143
    end = s.end_record()
    assert (end["exit_code"], end["signal"]) == (None, signal.SIGTERM)
    assert exit_info_from_status(end) == ExitInfo(None, signal.SIGTERM, end["ended_at"])


def test_sigkill_leaves_no_end_record(tmp_path: Path, shims: list[Shim]) -> None:
    s = start(shims, tmp_path, py("import time; print('ready', flush=True); time.sleep(60)"))
    wait_text(s.log, "ready")
    os.killpg(s.proc.pid, signal.SIGKILL)
    assert s.wait() == -signal.SIGKILL
    assert "ended_at" not in s.record()


def test_tee_copies_bytes_exactly(tmp_path: Path, shims: list[Shim]) -> None:
    payload = bytes(range(256)) * 300 + b"\r\nno newline at the end \xff\xfe"
    code = ("import sys; sys.stdout.buffer.write(open(sys.argv[1], 'rb').read()); "
            "sys.stdout.flush(); sys.stderr.write('err\\n')")
    src = tmp_path / "payload"
    src.write_bytes(payload)
    (tmp_path / "job.log").write_bytes(b"earlier attempt\n")
    s = start(shims, tmp_path, py(code, str(src)), tee=True)
    assert s.wait() == 0
    assert s.tee_out.read_bytes() == payload + b"err\n"
    assert s.log.read_bytes() == b"earlier attempt\n" + payload + b"err\n"


def test_tee_does_not_wait_for_background_children(tmp_path: Path, shims: list[Shim]) -> None:
    """A background process holding the output pipe must not keep the shim waiting."""
    s = start(shims, tmp_path, ["/bin/sh", "-c", "sleep 60 & echo started; exit 2"], tee=True)
    assert s.wait(timeout=5) == 2
    assert s.log.read_text() == "started\n"
    signal_group(s.proc.pid, signal.SIGKILL)  # the leftover sleep


def test_tee_without_a_terminal_still_logs(tmp_path: Path) -> None:
    """A closed pane (stdout gone) must not lose the log."""
    status, log = tmp_path / "s.json", tmp_path / "l.log"
    r = subprocess.run([*SHIM, "--status", str(status), "--tee", str(log), "--",
                        *py("print('x' * 100000)")], stdout=subprocess.DEVNULL, timeout=10,
                       check=False)
    assert r.returncode == 0
    assert log.read_text() == "x" * 100000 + "\n"
    proc = subprocess.Popen([*SHIM, "--status", str(status), "--tee", str(log), "--",
                             *py("import time; time.sleep(0.2); print('y' * 100000)")],
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.close()  # the reader goes away: writes to stdout fail with EPIPE
    assert proc.wait(10) == 0
    assert log.read_text().endswith("y" * 100000 + "\n")


@pytest.mark.parametrize("tee", [False, True])
def test_not_found_127_with_message(tmp_path: Path, shims: list[Shim], tee: bool) -> None:
    s = start(shims, tmp_path, ["rota-no-such-program", "x"], tee=tee)
    assert s.wait() == 127
    end = s.end_record()
    assert (end["exit_code"], end["child_pid"]) == (127, None)
    log = s.log.read_text()
    assert log == "rota: cannot run 'rota-no-such-program': No such file or directory\n"


def test_not_executable_126(tmp_path: Path, shims: list[Shim]) -> None:
    s = start(shims, tmp_path, [str(tmp_path)])  # a directory
    assert s.wait() == 126
    assert s.end_record()["exit_code"] == 126
    assert "Permission denied" in s.log.read_text()


def test_job_file(tmp_path: Path, shims: list[Shim], monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out.json"
    work = tmp_path / "work"
    work.mkdir()
    job = tmp_path / "job.json"
    code = ("import json, os, sys; json.dump([sys.argv[1:], os.getcwd(), os.environ.get('A'), "
            "os.environ.get('TERM'), os.environ.get('HOME')], open(sys.argv[1], 'w'))")
    job.write_text(json.dumps({"argv": py(code, str(out), "x;", "$(y)"),
                               "env": {"A": "1", "PATH": os.environ["PATH"]}, "cwd": str(work)}))
    monkeypatch.setenv("TERM", "pane-term")  # the shim keeps its terminal's variables
    s = start(shims, tmp_path, [], job_file=job)
    assert s.wait() == 0
    assert json.loads(out.read_text()) == [[str(out), "x;", "$(y)"], str(work), "1",
                                           "pane-term", None]
    assert not job.exists()  # secrets do not stay on disk


def test_bad_job_file_is_a_clear_error(tmp_path: Path, shims: list[Shim]) -> None:
    job = tmp_path / "job.json"
    job.write_text("{not json")
    s = start(shims, tmp_path, [], job_file=job)
    assert s.wait() == 126
    assert s.log.read_text().startswith("rota: cannot read the job file")
    assert "Traceback" not in s.log.read_text()


def test_usage_error_without_program(tmp_path: Path) -> None:
    r = subprocess.run([*SHIM, "--status", str(tmp_path / "s")], capture_output=True,
                       text=True, timeout=10, check=False)
    assert r.returncode == 2
    assert "give the program either after -- or in --job-file" in r.stderr


def test_shim_imports_stay_light() -> None:
    code = ("import sys, rota.backends.shim; heavy = ('pydantic', 'sqlalchemy', 'psutil', "
            "'fastapi', 'rota.backends.base', 'rota.errors'); "
            "print([m for m in sys.modules if m.split('.')[0] in heavy or m in heavy])")
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    assert r.stdout.strip() == "[]"


# --- common helpers -----------------------------------------------------------------------


def test_read_status_tolerates_missing_partial_and_odd(tmp_path: Path) -> None:
    p = tmp_path / "s.json"
    assert read_status(p) is None
    p.write_text('{"shim_pid": 1, "chi')
    assert read_status(p) is None
    p.write_text("[1, 2]")
    assert read_status(p) is None
    p.write_text('{"shim_pid": 1}')
    assert read_status(p) == {"shim_pid": 1}


def test_exit_info_from_status() -> None:
    assert exit_info_from_status(None) is None
    assert exit_info_from_status({"shim_pid": 1, "started_at": 1.0}) is None
    assert exit_info_from_status({"exit_code": 3, "signal": None, "ended_at": 2.5}) == \
        ExitInfo(3, None, 2.5)
    assert exit_info_from_status({"exit_code": None, "signal": 15, "ended_at": 2}) == \
        ExitInfo(None, 15, 2.0)
    assert ExitInfo(None, signal.SIGKILL, None) == KILLED


def test_pid_alive_zombie_and_reap() -> None:
    proc = subprocess.Popen([PY, "-c", "import sys; sys.exit(9)"])
    assert pid_alive(os.getpid())
    wait_for(lambda: not pid_alive(proc.pid), what="the zombie to count as dead")
    assert os.path.exists(f"/proc/{proc.pid}")  # still a zombie: dead, not yet reaped
    assert reap(proc.pid) == 9
    assert reap(proc.pid) is None  # already reaped: not our child any more
    proc.returncode = 9
    assert not pid_alive(proc.pid)
    assert reap(1) is None  # not our child
    assert not pid_alive(0) and not pid_alive(-5)


def test_pid_alive_rejects_recycled_pid() -> None:
    me = os.getpid()
    assert pid_alive(me, started_at=None)
    assert not pid_alive(me, started_at=1.0)  # this process started long after 1970


def test_signal_group_missing_group_and_zero() -> None:
    signal_group(2**22 + 12345, signal.SIGTERM)  # no such group: no error
    with pytest.raises(BackendError):
        signal_group(0, signal.SIGTERM)


def _req(tmp: Path, argv: list[str], **kw: Any) -> LaunchRequest:
    base: dict[str, Any] = {"job_id": 1, "attempt": 1, "argv": argv, "shell": False, "env": {},
                            "cwd": None, "conda": None, "log_path": tmp / "l.log",
                            "status_path": tmp / "s.json", "session_name": "rota-1-1"}
    return LaunchRequest(**{**base, **kw})


def test_build_job_argv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert build_job_argv(_req(tmp_path, ["python", "a b.py", "x;y"])) == \
        ["python", "a b.py", "x;y"]
    assert build_job_argv(_req(tmp_path, ["echo $X"], shell=True)) == \
        ["/bin/sh", "-c", "echo $X"]
    assert build_job_argv(_req(tmp_path, ["echo $1", "--gpu=0"], shell=True)) == \
        ["/bin/sh", "-c", "echo $1", "sh", "--gpu=0"]
    fake = tmp_path / "conda"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CONDA_EXE", str(fake))
    assert build_job_argv(_req(tmp_path, ["train.py"], conda="ml")) == \
        [str(fake), "run", "-n", "ml", "--no-capture-output", "train.py"]
    monkeypatch.delenv("CONDA_EXE")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert build_job_argv(_req(tmp_path, ["x"], conda="ml"))[0] == str(fake)
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(BackendError, match="conda environment 'ml' requested but conda is not "
                                           "installed on this machine"):
        build_job_argv(_req(tmp_path, ["x"], conda="ml"))
    with pytest.raises(BackendError, match="empty command"):
        build_job_argv(_req(tmp_path, []))


def test_shim_argv(tmp_path: Path) -> None:
    req = _req(tmp_path, ["prog", "a"])
    assert shim_argv(req, tee=False) == [sys.executable, "-m", "rota.backends.shim", "--status",
                                         str(req.status_path), "--", "prog", "a"]
    assert shim_argv(req, tee=True)[4:8] == [str(req.status_path), "--tee", str(req.log_path),
                                             "--"]
    jf = tmp_path / "j.json"
    assert shim_argv(req, tee=True, job_file=jf)[-2:] == ["--job-file", str(jf)]
    assert "prog" not in shim_argv(req, tee=True, job_file=jf)


def test_write_job_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("TMUX", "/tmp/other,1,0")
    monkeypatch.setenv("FROM_DAEMON", "d")
    req = _req(tmp_path, ["prog"], env={"SECRET": "s3cret"}, cwd=str(tmp_path))
    path = write_job_file(req)
    assert path.stat().st_mode & 0o777 == 0o600
    job = json.loads(path.read_text())
    assert job["argv"] == ["prog"] and job["cwd"] == str(tmp_path)
    assert job["env"]["SECRET"] == "s3cret" and job["env"]["FROM_DAEMON"] == "d"
    assert "TERM" not in job["env"] and "TMUX" not in job["env"]


def test_with_append_the_shim_adds_lines_to_the_status_file_it_was_given(
        tmp_path: Path) -> None:
    """A shim run as a job's account may write its status file, not create one beside it:
    it appends one JSON line at the start and one at the end, and nothing else appears."""
    status = tmp_path / "st" / "1-1.json"
    status.parent.mkdir()
    status.touch()
    r = subprocess.run([*SHIM, "--append", "--status", str(status), "--", "sh", "-c",
                        "exit 3"], capture_output=True, timeout=30, check=False)
    assert r.returncode == 3, r.stderr
    lines = [json.loads(line) for line in status.read_text().splitlines()]
    assert len(lines) == 2 and lines[0]["child_pid"] and "ended_at" not in lines[0]
    assert lines[1]["exit_code"] == 3
    rec = read_status(status)
    assert rec is not None and rec["exit_code"] == 3 and rec["shim_pid"] == lines[0]["shim_pid"]
    assert [p.name for p in status.parent.iterdir()] == ["1-1.json"]
