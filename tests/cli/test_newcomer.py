"""What a newcomer trips over: 80 columns, --force, names for jobs, wording, filters."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

PY = sys.executable


def cli(daemon: Any, *args: str, columns: int = 80, stdin: str | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`rota ARGS` as a user runs it, its output a pipe (no terminal) COLUMNS wide."""
    env = {**os.environ, **daemon.env, "COLUMNS": str(columns)}
    return subprocess.run([PY, "-m", "rota", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, input=stdin, check=False)


def _ids(rota: Any, *args: str) -> list[int]:
    r = rota("submit", "--json", *args)
    assert r.exit_code == 0, r.output
    return [int(j["id"]) for j in json.loads(r.stdout)["jobs"]]


def _fits(text: str, width: int = 80) -> None:
    for line in text.splitlines():
        assert len(line) <= width, f"{len(line)} > {width}: {line!r}"
    assert "…" not in text  # nothing was cut short


def _flat(text: str) -> str:
    """The words in order, line breaks and padding gone (a wrapped text reads whole)."""
    return " ".join(text.split())


# --- 80 columns ------------------------------------------------------------------------------

def test_queue_at_80_columns_cuts_no_header_name_or_reason(rota: Any, daemon: Any) -> None:
    ids = _ids(rota, "--hold", "--gpus", "0.5", "--sweep", "lr=1e-3,3e-4",
               "--sweep", "seed=1..2", "--", "python", "./scripts/train.py", "--lr", "{lr}")
    big = _ids(rota, "--force", "--gpu-mem", "100G", "--name", "too-big", "--", "true")[0]
    try:
        r = cli(daemon, "queue")
        assert r.returncode == 0, r.stderr
        _fits(r.stdout)
        head = r.stdout.splitlines()[0].split()
        assert head[:3] == ["id", "name", "user"] and "state" in head and "time" in head
        for name in ("train[lr=1e-3,seed=1]", "train[lr=3e-4,seed=2]", "too-big"):
            assert name in r.stdout
        flat = _flat(r.stdout)
        assert "held: `rota release` lets it run" in flat
        reason = _flat(daemon.client.why(big)["message"])
        assert reason in flat, (reason, r.stdout)
        wide = cli(daemon, "queue", "--wide")
        assert "reason / progress" in wide.stdout and "project" in wide.stdout
        assert any(reason in line for line in wide.stdout.splitlines())  # on one line
        rows = [j for j in json.loads(cli(daemon, "queue", "--json").stdout)["jobs"]
                if j["state"] == "held"]
        assert {"id", "name", "reason", "gpu_mem"} <= set(rows[0])
    finally:
        for j in [*ids, big]:
            daemon.client.cancel(j)


def test_gpus_at_80_columns_shows_memory_and_headers_whole(daemon: Any) -> None:
    r = cli(daemon, "gpus")
    assert r.returncode == 0, r.stderr
    _fits(r.stdout)
    head = r.stdout.splitlines()[0].split()
    assert head == ["gpu", "used/total", "outside", "rota", "util", "share", "jobs", "kept",
                    "for", "state"]
    rows = [line.split() for line in r.stdout.splitlines()[2:6]]
    assert [row[0] for row in rows] == ["0", "1", "2", "3"]
    assert all(re.fullmatch(r"[\d.]+[BKMG]/24G", row[1]) for row in rows), rows


def test_show_at_80_columns_keeps_times_and_headers_on_one_line(
        rota: Any, daemon: Any) -> None:
    jid = _ids(rota, "--gpus", "0", "--name", "show-me", "--tag", "x", "--", "true")[0]
    assert daemon.client.wait(jid, timeout=20)["state"] == "completed"
    r = cli(daemon, "show", "show-me")
    assert r.returncode == 0, r.stderr
    _fits(r.stdout)
    text = "\n".join(line.rstrip() for line in r.stdout.splitlines())
    assert re.search(r"^submitted\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$", text, re.M), text
    assert re.search(r"^#1 CPU \(share 0\) \d\d:\d\d:\d\d to \d\d:\d\d:\d\d \d+s exit 0 "
                     r"completed, local pid \d+$", text, re.M), text
    assert re.search(r"^time\s+event\s+state\s+message$", text, re.M)
    assert re.search(r"^\d\d:\d\d:\d\d\s+submitted\s+->pending\s+submitted by", text, re.M)


# --- memory, --force, warnings, line numbers -------------------------------------------------

def test_gpu_mem_bare_number_is_gib(rota: Any, daemon: Any) -> None:
    jid = _ids(rota, "--hold", "--gpu-mem", "20", "--", "true")[0]
    try:
        assert daemon.client.job(jid)["spec"]["gpu_mem"] == 20 << 30
    finally:
        daemon.client.cancel(jid)
    r = rota("submit", "--help")
    assert "GiB unless a unit is given: 20, 20G, 512M" in _flat(r.stdout)


def test_a_job_that_cannot_run_here_is_refused_unless_forced(
        rota: Any, daemon: Any, tmp_path: Path) -> None:
    r = rota("submit", "--gpus", "5", "--", "true")
    assert r.exit_code == 2
    assert "5" in r.stderr and "GPU" in r.stderr and "jobs[0]" not in r.stderr
    f = tmp_path / "jobs.yaml"
    f.write_text("- {command: 'true', gpus: 0, name: fine}\n"
                 "- command: 'true'\n"
                 "  gpus: 6\n"
                 "  name: too-many\n")
    r = rota("submit", "-f", str(f))
    assert r.exit_code == 2
    assert f"{f}:2: " in r.stderr and "GPU" in r.stderr
    forced = json.loads(rota("submit", "-f", str(f), "--force", "--dedup", "--json").stdout)
    [job] = [j for j in forced["jobs"] if j["name"] == "too-many"]
    try:
        assert job["state"] == "pending"
    finally:
        daemon.client.cancel(job["id"])


def test_submit_warnings_go_to_stderr(rota: Any, daemon: Any) -> None:
    try:
        daemon.client.drain(on=True)
        r = cli(daemon, "submit", "--gpus", "0", "--", "true")
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("submitted job ") and "draining" not in r.stdout
        assert "warning: the daemon is draining: no job starts until `rota drain --off`" \
            in _flat(r.stderr)
    finally:
        daemon.client.drain(on=False)


def test_add_leaves_no_line_the_daemon_refuses(rota: Any, daemon: Any) -> None:
    jobs_file = daemon.home / "jobs.txt"
    before = jobs_file.read_text() if jobs_file.exists() else ""
    r = rota("add", "1", "x.sh", "--allowed-gpus", "9")
    assert r.exit_code == 2, r.output
    assert f"{jobs_file}:" in r.stderr and "9" in r.stderr and "taken out again" in r.stderr
    assert (jobs_file.read_text() if jobs_file.exists() else "") == before


# --- wording ---------------------------------------------------------------------------------

def test_why_reads_as_a_sentence(rota: Any, daemon: Any, until: Any) -> None:
    jid = _ids(rota, "--gpus", "0", "--grace", "1s", "--", "sleep", "30")[0]
    until(lambda: daemon.client.job(jid)["state"] == "running", 20, "job to run")
    r = rota("why", str(jid))
    assert re.fullmatch(rf"job {jid} runs on the CPU only since \d\d:\d\d(:\d\d)?.*\n",
                        r.stdout), r.stdout
    gpu = _ids(rota, "--gpus", "1", "--grace", "1s", "--", "sleep", "30")[0]
    until(lambda: daemon.client.job(gpu)["state"] == "running", 20, "job to run")
    assert re.match(rf"job {gpu} runs on GPU \d since ", rota("why", str(gpu)).stdout)
    for j in (jid, gpu):
        rota("cancel", str(j))
    done = _ids(rota, "--gpus", "0", "--", "true")[0]
    daemon.client.wait(done, timeout=20)
    r = rota("why", str(done))
    assert re.match(rf"job {done} completed at \S+ with exit code 0", r.stdout), r.stdout
    assert "it is" not in r.stdout


def test_logs_follow_says_once_that_it_waits_for_the_start(
        rota: Any, daemon: Any) -> None:
    jid = _ids(rota, "--hold", "--gpus", "0", "--", "echo", "hello-from-the-job")[0]
    env = {**os.environ, **daemon.env}
    proc = subprocess.Popen([PY, "-m", "rota", "logs", "-f", str(jid)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith(f"job {jid} is held (`rota release` lets it run); waiting for "
                               "it to start"), line
        assert rota("release", str(jid)).exit_code == 0
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "hello-from-the-job" in out
    assert "waiting" not in err  # said once


# --- names, several jobs, filters ------------------------------------------------------------

def test_jobs_by_name(rota: Any, daemon: Any) -> None:
    a = _ids(rota, "--hold", "--name", "named-once", "--", "true")[0]
    assert json.loads(rota("show", "named-once", "--json").stdout)["id"] == a
    b, c = (_ids(rota, "--hold", "--name", "named-twice", "--", "true")[0] for _ in range(2))
    r = rota("cancel", "named-twice")
    assert r.exit_code == 1
    assert f"2 jobs are named 'named-twice': {b} (held), {c} (held)" in _flat(r.stderr)
    r = rota("release", "named-once")
    assert r.exit_code == 0 and f"released job {a}" in r.stdout
    r = rota("why", "no-job-has-this-name")
    assert r.exit_code == 1 and "no job is named" in r.stderr
    daemon.client.wait(a, timeout=20)
    dep = _ids(rota, "--hold", "--after", "named-once", "--", "true")[0]
    assert daemon.client.job(dep)["spec"]["after"] == [a]
    for j in (b, c, dep):
        daemon.client.cancel(j)


def test_cancel_by_filter_asks_first(rota: Any, daemon: Any) -> None:
    ids = _ids(rota, "--hold", "--sweep", "k=1..3", "--name", "bulk", "--", "true")
    r = cli(daemon, "cancel", "--name", "bulk[", stdin="n\n")
    assert r.returncode == 1 and "nothing cancelled" in r.stderr
    assert "cancel 3 jobs" in r.stderr
    assert all(daemon.client.job(j)["state"] == "held" for j in ids)
    r = cli(daemon, "cancel", "--name", "bulk[", "--state", "held", stdin="y\n")
    assert r.returncode == 0, r.stderr
    assert all(f"cancelled job {j}" in r.stdout for j in ids)
    r = cli(daemon, "cancel", "--name", "bulk[", "--yes")
    assert r.returncode == 0 and "nothing to cancel" in r.stdout
    assert cli(daemon, "cancel", "1", "--all", "--yes").returncode == 2


def test_wait_for_several_exits_with_the_worst_code(rota: Any) -> None:
    ok = _ids(rota, "--gpus", "0", "--", "true")[0]
    bad = _ids(rota, "--gpus", "0", "--", PY, "-c", "import sys; sys.exit(5)")[0]
    r = rota("wait", str(ok), str(bad), "--json")
    assert r.exit_code == 5
    assert [d["id"] for d in json.loads(r.stdout)] == [ok, bad]


def _as_a_foreground_job() -> None:
    """SIGINT as a shell's foreground job gets it: pytest itself may run with SIGINT ignored
    or blocked (started in the background by a non-interactive shell, say), and both are
    inherited across exec, so Python would never raise KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _why_not_ended(proc: subprocess.Popen[str]) -> str:
    """What kept `rota queue --watch` from ending after Ctrl-C: where its threads were (it
    is aborted, faulthandler on), or which processes still hold its output pipes open."""
    import psutil

    assert proc.stdout is not None
    pipe = f"pipe:[{os.fstat(proc.stdout.fileno()).st_ino}]"
    holders = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(OSError, psutil.Error):
            fds = os.listdir(f"/proc/{p.pid}/fd")
            if any(os.readlink(f"/proc/{p.pid}/fd/{fd}") == pipe for fd in fds):
                holders.append((p.pid, p.info["cmdline"]))
    running = proc.poll() is None
    ignored = ""
    if running:
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{proc.pid}/status").read_text()
            ignored = " ".join(line for line in status.splitlines()
                               if line.startswith(("SigBlk", "SigIgn", "SigCgt")))
        proc.send_signal(signal.SIGABRT)
    try:
        _, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        err = "(nothing more: its pipes stayed open)"
    return (f"rota queue --watch did not end 30 s after Ctrl-C: still running {running} "
            f"({ignored}), exit {proc.returncode}, its stdout held open by {holders}; "
            f"its stderr:\n{err}")


def test_queue_watch_redraws_until_ctrl_c(daemon: Any) -> None:
    # faulthandler: should it not end, SIGABRT makes it print where each thread is
    env = {**os.environ, **daemon.env, "COLUMNS": "80", "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.Popen([PY, "-m", "rota", "queue", "--watch", "0.2"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_as_a_foreground_job)
    assert proc.stdout is not None
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 2 and time.monotonic() < deadline:
        if proc.stdout.readline().startswith("every 0.2s, at "):
            seen += 1
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=30)  # a loaded 2-core CI machine is slow to exit
    except subprocess.TimeoutExpired:
        pytest.fail(_why_not_ended(proc))
    assert seen == 2 and proc.returncode == 0, err
    assert "Traceback" not in err


# --- help, version ------------------------------------------------------------------------------

def _commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    import click

    out = []
    for name, cmd in group.commands.items():
        out.append(((*path, name), cmd))
        if isinstance(cmd, click.Group):
            out += _commands(cmd, (*path, name))
    return out


def test_help_shows_no_python_types_and_every_json_is_described(rota: Any) -> None:
    import typer.main

    from rota.cli.main import app

    root = typer.main.get_command(app)
    commands = _commands(root)
    assert len(commands) > 25
    for path, cmd in commands:
        r = rota(*path, "--help")
        assert r.exit_code == 0, path
        assert not re.search(r"<(bool|str|int|float|list\[|Path|path)", r.stdout), \
            (path, r.stdout)
        for p in cmd.params:
            if "--json" in getattr(p, "opts", []):
                assert p.help, f"{' '.join(path)} --json has no description"
        if cmd.help:  # the one-line summary in `rota --help` is a whole sentence
            first = cmd.help.split("\n\n")[0]
            assert "\n" not in first.strip(), (path, first)


def test_version(rota: Any) -> None:
    from rota import __version__

    r = rota("--version")
    assert r.exit_code == 0 and r.stdout == f"rota {__version__}\n"


@pytest.mark.parametrize("args", [["--show-completion", "bash"]])
def test_shell_completion_is_offered(args: list[str], daemon: Any) -> None:
    r = cli(daemon, *args)
    assert "--install-completion" in cli(daemon, "--help").stdout
    assert r.returncode == 0 and "complete" in r.stdout and "rota" in r.stdout


def test_user_rm_asks_then_revokes_tokens(daemon: Any) -> None:
    assert cli(daemon, "user", "add", "bob-rm").returncode == 0
    assert cli(daemon, "token", "create", "--user", "bob-rm").returncode == 0
    r = cli(daemon, "user", "rm", "bob-rm", stdin="n\n")
    assert r.returncode == 1 and "remove user bob-rm" in r.stderr
    r = cli(daemon, "user", "rm", "bob-rm", "--yes")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "user bob-rm removed: 1 token(s) revoked, 0 job(s) cancelled"
    assert "bob-rm" not in cli(daemon, "user", "list").stdout
