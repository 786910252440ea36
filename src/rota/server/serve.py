"""Running the daemon: state directory, store, GPUs, the API socket, and clean shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from rota.config import Settings
from rota.devices.probe import open_devices
from rota.errors import DaemonUnavailable, RotaError
from rota.server.home_lock import check_unlocked, lock_home, prepare_home, settle_home
from rota.server.loop.daemon import Daemon
from rota.server.workers import ApiWorkers
from rota.store.db import redact_url
from rota.store.repo import Store

log = logging.getLogger("rota.server")


def serves_everyone() -> bool:
    """A root daemon serves every local account (the kernel says who connects, and each
    one's jobs run as that account); any other daemon serves its own account alone."""
    return os.geteuid() == 0


def socket_alive(path: Path) -> bool:
    if not path.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(str(path))
            return True
        except OSError:
            return False


def run_foreground(settings: Settings, *, announce: bool = True) -> None:
    prepare_home(settings.home, everyone=serves_everyone())
    lock = lock_home(settings.home)  # held until this process ends; before migrations
    if socket_alive(settings.socket_path):
        raise RotaError(f"a Rota daemon is already running on {settings.socket_path}")
    # only now, the home ours: a refused start never touches a running daemon's files
    settle_home(settings.home, everyone=serves_everyone())
    settings.socket_path.unlink(missing_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    store = Store.open(settings.db_url)
    devices, message = open_devices(settings.simulate)
    if announce:
        print(message if devices.kind == "simulated" else f"GPUs: {message}", flush=True)
        print(f"state: {redact_url(settings.db_url)}; socket: {settings.socket_path}", flush=True)
    try:
        run_loop(_serve(settings, store, devices))
    finally:
        settings.socket_path.unlink(missing_ok=True)
        settings.pid_path.unlink(missing_ok=True)
        store.close()
        os.close(lock)


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run the daemon on uvloop where it is installed (the default on Linux): its event
    loop and uvicorn's httptools parser cost a fraction of the pure-Python ones per
    request and per job exit; plain asyncio otherwise."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)


def _tune_gc() -> None:
    """What exists after start-up (modules, the recovered queue) lives as long as the
    daemon: freeze it out of the collector's scans, and collect the young generation less
    often. With a big queue, full collections were the tail of the API's latency under
    load (p99 86 -> 68 ms in bench/bench_api_load.py)."""
    gc.freeze()
    gc.set_threshold(20_000, 10, 10)


async def _serve(settings: Settings, store: Store, devices) -> None:  # type: ignore[no-untyped-def]
    import uvicorn

    from rota.server.api import build_app, tcp_app
    from rota.server.daemon_ports import DaemonPorts
    from rota.server.intake import Intake

    # bound before anything starts: a port in use stops the daemon before it takes up work
    listeners = _listeners(*settings.listen_address, settings.api_workers) \
        if settings.listen is not None and settings.api_workers else []
    daemon = Daemon(settings, store, devices)
    await daemon.start()
    _tune_gc()
    intake = Intake(daemon)
    servers: list[uvicorn.Server] = []

    def stop() -> None:
        for s in servers:
            s.should_exit = True

    ports = DaemonPorts(daemon, intake, on_shutdown=stop)
    app = build_app(ports, ports, max_request_bytes=settings.max_request_bytes)
    common: dict[str, Any] = {"log_level": "warning", "access_log": False, "lifespan": "off",
                              "timeout_graceful_shutdown": 2}
    server = uvicorn.Server(uvicorn.Config(app, uds=str(settings.socket_path),
                                           http=_socket_protocol(), **common))
    servers.append(server)
    workers: ApiWorkers | None = None
    tasks: list[asyncio.Task[None]] = []
    if settings.listen is not None:
        host, port = settings.listen_address
        if host not in ("127.0.0.1", "::1", "localhost"):
            log.warning("listening on %s:%s without TLS: tokens cross the network in clear "
                        "text; put a TLS proxy in front of it", host, port)
        if listeners:  # the daemon binds the listeners; its workers accept on them
            workers = ApiWorkers(settings, listeners)
            workers.start()
            tasks.append(asyncio.create_task(workers.supervise()))
        else:
            servers.append(uvicorn.Server(uvicorn.Config(tcp_app(app), host=host, port=port,
                                                         **common)))
    tasks.append(asyncio.create_task(_watch_jobs_file(intake, settings.jobs_file_poll)))
    tasks.append(asyncio.create_task(_announce_ready(server, settings)))
    try:
        await asyncio.gather(*(s.serve() for s in servers))
    finally:
        for t in tasks:
            t.cancel()
        if workers is not None:
            workers.stop()
        await daemon.stop()


def _socket_protocol() -> type[asyncio.Protocol]:
    """Uvicorn's own HTTP protocol, told the peer's uid on each connection
    (rota.server.access.peer)."""
    from uvicorn.config import HTTP_PROTOCOLS
    from uvicorn.importer import import_from_string

    from rota.server.access.peer import peer_aware

    return peer_aware(import_from_string(HTTP_PROTOCOLS["auto"]))


def _listeners(host: str, port: int, count: int) -> list[socket.socket]:
    """One listening socket per API worker, all on the same port (SO_REUSEPORT): the kernel
    spreads new connections evenly over them. On one shared socket, whichever worker woke
    first took them: 50 connections opened at once all went to one of two workers."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    out: list[socket.socket] = []
    try:
        for _ in range(count):
            out.append(socket.create_server((host, port), backlog=2048, family=family,
                                            reuse_port=count > 1))
            port = out[0].getsockname()[1]  # port 0: the others join the one it got
    except OSError as e:
        for s in out:
            s.close()
        raise RotaError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e
    return out


async def _announce_ready(server, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    while not server.started:
        await asyncio.sleep(0.01)
    # who connects is told by the kernel (rota.server.access.auth): a root daemon lets every local
    # account in, as itself; any other daemon only its own account
    os.chmod(settings.socket_path, 0o666 if serves_everyone() else 0o600)
    settings.pid_path.write_text(str(os.getpid()))
    log.info("listening on %s", settings.socket_path)
    url = settings.reach_url()
    if url:
        log.info("dashboard and API on %s/", url)


async def _watch_jobs_file(intake, every: float) -> None:  # type: ignore[no-untyped-def]
    while True:
        try:
            intake.poll_jobs_file()
        except Exception:
            log.exception("reading the jobs file failed")
        await asyncio.sleep(every)


def start_detached(settings: Settings, argv: list[str], *, timeout: float = 30.0) -> int:
    """Start `rota server` in its own session; return its pid once the socket answers."""
    prepare_home(settings.home, everyone=serves_everyone())
    check_unlocked(settings.home)
    if socket_alive(settings.socket_path):
        raise RotaError(f"a Rota daemon is already running on {settings.socket_path}")
    log_path = settings.home / "daemon.log"
    with open(log_path, "ab") as out:
        start = out.tell()
        proc = subprocess.Popen([sys.executable, "-m", "rota", *argv], stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DaemonUnavailable(f"the daemon exited with code {proc.returncode}"
                                    f"{_last_words(log_path, start)}; see {log_path}")
        if socket_alive(settings.socket_path) and settings.pid_path.exists():
            return proc.pid
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    raise DaemonUnavailable(f"the daemon did not answer within {timeout:g}s; see {log_path}")


def _last_words(log_path: Path, start: int) -> str:
    """The last line the child wrote to daemon.log (its refusal, say), after ': '."""
    try:
        with open(log_path, "rb") as f:
            f.seek(start)
            lines = f.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return f": {lines[-1].strip()}" if lines else ""
