"""Test helpers: a real daemon in a subprocess or in-process, and waits with a deadline."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rota.client import RawClient as Client

if TYPE_CHECKING:
    from rota.server.loop.daemon import Daemon
    from rota.store.repo import Store


#: the least time a test waits for something that is to happen (a daemon to answer, a job
#: to start, a page to show it): the suite must pass on a loaded 2-core machine (another
#: process keeping a core busy), and every wait polls, so a fast machine is no slower.
#: ROTA_TEST_PATIENCE sets it, in seconds.
PATIENCE_S = float(os.environ.get("ROTA_TEST_PATIENCE") or 60)


def patience(timeout: float = 0.0) -> float:
    """A wait's deadline in seconds: what the test asks for, or PATIENCE_S if longer."""
    return max(timeout, PATIENCE_S)


class DaemonProcess:
    """Start, SIGKILL and restart `rota server` the way a user (or a crash) would."""

    def __init__(self, home: Path, simulate: str | None = "4x24G",
                 extra_env: dict[str, str] | None = None, args: list[str] | None = None,
                 python: str = sys.executable) -> None:
        """SIMULATE None: the machine's own GPUs, through NVML. PYTHON runs the daemon (and
        so its shims: one other accounts can run, for their jobs in sessions)."""
        self.home, self.simulate, self.python = home, simulate, python
        self.args = args or []
        self.env = {**os.environ, "ROTA_HOME": str(home), **(extra_env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.socket = home / "rota.sock"

    def start(self, timeout: float = 30.0) -> DaemonProcess:
        self.home.mkdir(parents=True, exist_ok=True)
        log = open(self.home / "daemon-test.log", "ab")  # noqa: SIM115 - lives with the process
        self.proc = subprocess.Popen(
            [self.python, "-m", "rota", "server",
             *(["--simulate", self.simulate] if self.simulate else []), *self.args],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + patience(timeout)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode}: {self.log_text()}")
            if (self.home / "rota.pid").exists():
                try:
                    with self.client() as c:
                        c.health()
                    return self
                except Exception:
                    pass
            time.sleep(0.02)
        raise RuntimeError(f"daemon did not start: {self.log_text()}")

    def log_text(self) -> str:
        p = self.home / "daemon-test.log"
        return p.read_text(errors="replace")[-4000:] if p.exists() else ""

    def client(self) -> Client:
        return Client(self.socket)

    def cli(self, *args: str, cwd: Path | None = None, stdin: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """`rota ARGS` against this daemon, as a user runs it."""
        return subprocess.run([sys.executable, "-m", "rota", *args], env=self.env, cwd=cwd,
                              input=stdin, capture_output=True, text=True, timeout=timeout,
                              check=False)

    def submit(self, *args: str, cwd: Path | None = None) -> int:
        r = self.cli("submit", "--json", *args, cwd=cwd)
        assert r.returncode == 0, r.stderr
        return int(json.loads(r.stdout)["jobs"][0]["id"])

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, as in a crash."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        (self.home / "rota.pid").unlink(missing_ok=True)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def nvidia_driver_present() -> bool:
    """Whether NVML starts here: an NVIDIA driver and at least the library."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def free_port() -> int:
    """A TCP port nothing listens on now (for a daemon's --listen)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_daemon(home: Path, toml: str | None = None,
                   env: dict[str, str] | None = None) -> Iterator[DaemonProcess]:
    """A daemon in ``home`` (with ``toml`` as its rota.toml and ``env`` over the tests'),
    stopped after, and every job process it left killed."""
    if toml is not None:
        (home / "rota.toml").write_text(toml)
    d = DaemonProcess(home, extra_env=env).start()
    try:
        yield d
    finally:
        d.stop()
        kill_job_processes(home)


def without_modules(folder: Path, *names: str) -> dict[str, str]:
    """An environment in which ``import NAME`` fails as for a package not installed (each
    shadowed by one that raises ModuleNotFoundError), for a daemon, its runner and its jobs:
    an optional extra missing where Rota runs."""
    for name in names:
        (folder / name).mkdir(parents=True, exist_ok=True)
        (folder / name / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{name}'\", name={name!r})\n")
    kept = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {"PYTHONPATH": os.pathsep.join([str(folder), *kept])}


@contextlib.contextmanager
def root_daemon_in_tmp(prefix: str, *, args: list[str] | None = None,
                       **env: str) -> Iterator[DaemonProcess]:
    """A root daemon for everyone (ROTA_SHARED_ACCOUNT off) whose home other accounts can
    reach (a 0755 folder in /tmp: pytest's tmp_path is root's 0700); stopped, its jobs
    killed and its folder removed after."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(base, 0o755)
    d = DaemonProcess(base / "home", extra_env={"ROTA_SHARED_ACCOUNT": "false", **env},
                      args=args)
    try:
        yield d.start()
    finally:
        d.stop()
        kill_job_processes(base / "home")
        shutil.rmtree(base, ignore_errors=True)


def kill_job_processes(home: Path) -> None:
    """Leave no job behind: SIGKILL the local runner of this home with every job it started
    (each its own process group), and every shim whose status file lives in this home."""
    import psutil

    from rota.backends.shell_shim import MARK

    def kill_group(pid: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(pid)
            if group != os.getpgid(0):  # never the test's own group
                os.killpg(group, signal.SIGKILL)

    logs = str(home / "logs") + os.sep
    for p in psutil.process_iter(["pid", "cmdline"]):
        argv = p.info.get("cmdline") or []
        cmd = " ".join(argv)
        if str(home) not in cmd:
            # a job whose waiter is gone (reparented to init): known by its log's path
            with contextlib.suppress(psutil.Error):
                if p.info["pid"] != os.getpid() and \
                        p.environ().get("ROTA_LOG_PATH", "").startswith(logs):
                    kill_group(p.info["pid"])
            continue
        if "rota.backends.runner" in argv:
            with contextlib.suppress(psutil.Error):
                # its waiters, and under them the jobs, each in a process group of its own
                for child in p.children(recursive=True):
                    kill_group(child.pid)
                p.kill()
        elif "rota.backends.shim" in argv or MARK in argv:
            kill_group(p.info["pid"])


def wait_until(predicate, timeout: float = 20.0, every: float = 0.02, what: str = ""):  # type: ignore[no-untyped-def]
    """Poll a condition with a deadline (for effects that have no event to wait on); the
    deadline is ``timeout`` or PATIENCE_S, the longer."""
    timeout = patience(timeout)
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what or predicate}")
        time.sleep(every)


def pg_database() -> Iterator[str]:
    """Create a throwaway database on the test server; drop it afterwards."""
    base = os.environ.get("ROTA_TEST_PG_URL")
    if not base:
        if os.environ.get("ROTA_REQUIRE_PG"):
            pytest.fail("ROTA_REQUIRE_PG is set but ROTA_TEST_PG_URL is not")
        pytest.skip("no PostgreSQL server (set ROTA_TEST_PG_URL; scripts/test.sh starts one)")
    import psycopg

    name = f"rota_test_{uuid.uuid4().hex[:12]}"
    dsn = base.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = dsn.rsplit("/", 1)[0] + "/" + name
    yield url
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')



@asynccontextmanager
async def in_process_daemon(tmp_path: Path) -> AsyncIterator[tuple[Daemon, Store]]:
    """A started daemon on 2 simulated GPUs in this process (its loop is the caller's);
    afterwards no job process is left."""
    from rota.config import load_settings
    from rota.devices.simulated import SimulatedDevices
    from rota.server.loop.daemon import Daemon
    from rota.store.repo import Store

    settings = load_settings(home=tmp_path / "home")
    settings.home.mkdir(parents=True)
    store = Store.open(settings.db_url)
    d = Daemon(settings, store, SimulatedDevices("2x24G"))
    await d.start()
    await d.queue_ready.wait()
    try:
        yield d, store
    finally:
        if not d._stopping:
            await d.stop()
        kill_job_processes(tmp_path)
        store.close()


async def until(check: Callable[[], object], what: str, seconds: float = 10.0) -> None:
    """Await a condition with a deadline (``seconds`` or PATIENCE_S, the longer), letting
    the loop (an in-process daemon) run."""
    import asyncio

    seconds = patience(seconds)
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds:g}s waiting for {what}")
        await asyncio.sleep(0.01)


@contextlib.contextmanager
def unix_accounts(*names: str) -> Iterator[dict[str, int]]:
    """Real Unix accounts (with homes) for the duration, as root: name -> uid. Made afresh
    (one left by a killed run is removed first) and removed with every process they have."""
    import pwd

    for name in names:
        subprocess.run(["userdel", "-r", name], capture_output=True, check=False)
        subprocess.run(["useradd", "-m", name], check=True)
    try:
        yield {name: pwd.getpwnam(name).pw_uid for name in names}
    finally:
        for name in names:
            subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True, check=False)
            subprocess.run(["userdel", "-r", name], capture_output=True, check=False)


@contextlib.contextmanager
def s3_server(folder: Path, *buckets: str) -> Iterator[dict[str, str]]:
    """A real S3-protocol server (moto's, in a thread, on a free port) holding these
    buckets, for as long as the context lasts; yields the environment a daemon, a job or
    boto3 needs to reach it: dummy credentials, its endpoint, and no AWS config files."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    none = str(folder / "no-aws-config")
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL_S3": f"http://{host}:{port}",
           "AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none,
           "AWS_EC2_METADATA_DISABLED": "true"}
    s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL_S3"], region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    for bucket in buckets:
        s3.create_bucket(Bucket=bucket)
    try:
        yield env
    finally:
        server.stop()


def moto_s3(factory: pytest.TempPathFactory, *buckets: str) -> Iterator[dict[str, str]]:
    """A module's S3 fixture: :func:`s3_server` holding ``buckets``; the module's tests
    are skipped without boto3 and moto unless the run requires them (ROTA_REQUIRE_TORCH)."""
    try:
        import boto3  # noqa: F401 - s3_server's
        import moto.server  # noqa: F401 - s3_server's
    except ImportError:
        if os.environ.get("ROTA_REQUIRE_TORCH"):
            raise
        pytest.skip("needs boto3 and moto[server] (pip install 'rota[test]')")
    with s3_server(factory.mktemp("aws"), *buckets) as env:
        yield env


def s3_client(env: dict[str, str]) -> Any:
    """A boto3 client of the server :func:`s3_server` started (its dummy keys)."""
    import boto3

    return boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL_S3"],
                        region_name="us-east-1", aws_access_key_id="testing",
                        aws_secret_access_key="testing")
