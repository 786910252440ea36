"""Shared helpers for the baseline benchmarks: commands, waits, apt installs, free ports."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypedDict, TypeVar

T = TypeVar("T")

#: How long one apt-get call may take (download + unpack on a slow mirror).
APT_TIMEOUT_S = 1200.0


class BaselineError(RuntimeError):
    """A baseline system could not be installed, started, or did not finish its workload."""


class BaselineResult(TypedDict, total=False):
    """What ``run_workload`` returns; the first keys are shared by every baseline."""

    system: str
    jobs: int
    seconds: float
    jobs_per_s: float
    mode: str
    gpu_model: str
    tuned: bool
    # Extras (not every system fills all of them).
    slots: int
    submit_seconds: float
    completion_probe: str
    failed: int
    notes: list[str]
    install_seconds: float
    start_seconds: float
    stop_seconds: float
    total_seconds: float


def run_cmd(
    argv: Sequence[str],
    *,
    timeout: float = 60.0,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    check: bool = True,
    what: str | None = None,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (no shell), capture text output, fail with a readable error."""
    label = what or " ".join(argv)
    try:
        proc = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            stdin=subprocess.DEVNULL if input_text is None else None,
            input=input_text,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise BaselineError(f"{label}: timed out after {timeout:.0f}s") from exc
    except FileNotFoundError as exc:
        raise BaselineError(f"{label}: command not found: {argv[0]}") from exc
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise BaselineError(f"{label}: exit status {proc.returncode}: {tail}")
    return proc


def wait_for(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.2,
    on_timeout: Callable[[], str] | None = None,
) -> T:
    """Call ``probe`` until it returns something other than None/False, or raise after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() >= deadline:
            detail = ""
            if on_timeout is not None:
                try:
                    detail = "\n" + on_timeout()
                except Exception as exc:  # diagnostics must not hide the timeout
                    detail = f"\n(could not collect diagnostics: {exc})"
            raise BaselineError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)


def is_root() -> bool:
    return os.geteuid() == 0


def apt_install(packages: Sequence[str], *, timeout: float = APT_TIMEOUT_S) -> None:
    """Install Debian packages non-interactively (root only); runs ``apt-get update`` on a miss."""
    if not is_root():
        raise BaselineError(
            f"need root to install {' '.join(packages)} with apt-get (or install them first)"
        )
    if shutil.which("apt-get") is None:
        raise BaselineError(f"apt-get not found; install {' '.join(packages)} by hand")
    env = dict(os.environ)
    env["DEBIAN_FRONTEND"] = "noninteractive"
    env.setdefault("NEEDRESTART_MODE", "a")
    install = [
        "apt-get",
        "install",
        "-y",
        "-q",
        "--no-install-recommends",
        "-o",
        "DPkg::Lock::Timeout=300",
        "-o",
        "Dpkg::Options::=--force-confdef",
        "-o",
        "Dpkg::Options::=--force-confold",
        *packages,
    ]
    first = run_cmd(install, timeout=timeout, env=env, check=False, what="apt-get install")
    if first.returncode == 0:
        return
    # Most often the package lists are missing (fresh image) or stale: refresh once, retry.
    run_cmd(
        ["apt-get", "update", "-q", "-o", "DPkg::Lock::Timeout=300"],
        timeout=timeout,
        env=env,
        what="apt-get update",
    )
    run_cmd(install, timeout=timeout, env=env, what="apt-get install")


def free_tcp_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now (racy, but fine for private daemons)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env(
    extra: Mapping[str, str] | None = None, *, drop_prefixes: Sequence[str] = ()
) -> dict[str, str]:
    """A copy of the environment without variables that start with one of ``drop_prefixes``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(tuple(drop_prefixes))}
    if extra:
        env.update(extra)
    return env


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def tail_file(path: str, limit: int = 3000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read().decode(errors="replace")
    except OSError as exc:
        return f"(cannot read {path}: {exc})"


def stop_process(proc: subprocess.Popen[bytes], *, name: str, grace: float = 10.0) -> str | None:
    """SIGTERM one process we started (by its own pid), SIGKILL it after ``grace`` seconds.

    Returns a message when it had to be killed, else None.
    """
    if proc.poll() is not None:
        return None
    try:
        proc.terminate()
        proc.wait(timeout=grace)
        return None
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            return f"{name} (pid {proc.pid}) did not exit even after SIGKILL"
        return f"{name} (pid {proc.pid}) ignored SIGTERM for {grace:.0f}s and was killed"
    except ProcessLookupError:
        return None
