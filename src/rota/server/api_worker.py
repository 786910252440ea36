"""An API worker: a process of its own that serves the daemon's TCP listener, so that the
API uses more than the daemon's one core.

It answers the job reads (list, get) from the store (SQLite's WAL lets readers in beside
the one writer), asking the daemon over its socket only for the live facts of the jobs that
wait, start or run (their reason, their GPUs). Every other request goes to the daemon's
socket as it came, marked as coming over TCP so that its token, not the socket, decides
what it may do. A worker writes nothing: the daemon stays the only writer of state.

It times the requests it answers (those it forwards included: the time its client
waited) and reports the running totals to the daemon every REPORT_S, for /metrics.

    python -m rota.server.api_worker --fd N --daemon-pid PID --slot I
    (settings as JSON on stdin; the daemon runs it)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import socket
import sys
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import h11
from fastapi import Depends, FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from prometheus_client import CollectorRegistry, Histogram

from rota import __version__
from rota.config import Settings
from rota.errors import DaemonUnavailable
from rota.server.access.auth import VIA_HEADER, Authenticator, Principal
from rota.server.api import job_reads
from rota.server.api.admission import PointRequestsFirst
from rota.server.api.body_limit import BodyLimit
from rota.server.api.problems import answer_errors_as_problems
from rota.server.api.views import needs_live_facts, stored_facts
from rota.server.tracking.metrics import (
    FORWARDED_ROUTE_KEY,
    ROUTE_HEADER,
    RequestTimer,
    Totals,
    request_histogram,
    totals_of,
)
from rota.store.db import make_engine
from rota.store.repo import JobRecord, Store

# headers of one hop only, never passed on (RFC 9110 7.6.1), and what the proxy sets itself
_HOP = frozenset({b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization",
                  b"te", b"trailer", b"transfer-encoding", b"upgrade", b"host",
                  VIA_HEADER.encode()})
_ROUTE = ROUTE_HEADER.encode()
_METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
PARENT_CHECK_S = 1.0  # how often a worker checks that its daemon is still there
READ_BYTES = 65536
REPORT_S = 1.0  # how often a worker sends the daemon its request totals (when they changed)
KEEP_IDLE_S = 4.0  # a kept connection idle longer is not used again (the daemon's keep-alive
                   # timeout is 5 s)


class _Link:
    """One keep-alive HTTP/1.1 connection to the daemon's socket; h11 frames the messages."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = 0.0

    async def next_event(self) -> Any:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            self.h11.receive_data(await self.reader.read(READ_BYTES))

    def close(self) -> None:
        self.writer.close()


class Answer:
    """The daemon's answer: its head at once, its body as it comes."""

    def __init__(self, links: DaemonLinks, link: _Link, head: h11.Response) -> None:
        self._links, self._link, self.head = links, link, head

    async def body(self) -> AsyncIterator[bytes]:
        done = False
        try:
            while True:
                event = await self._link.next_event()
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    done = True
                    return
                elif isinstance(event, h11.ConnectionClosed):
                    raise DaemonUnavailable("the daemon closed the connection mid-answer")
        finally:
            self._links.release(self._link, reusable=done)

    async def read(self) -> bytes:
        """The whole body."""
        return b"".join([chunk async for chunk in self.body()])


class DaemonLinks:
    """Requests to the daemon's socket over kept-alive connections, one request at a time
    on each. (A general client such as httpx cost the worker several times more CPU per
    request and queued requests under concurrency: submits waited 240 ms at p50.)"""

    def __init__(self, path: str) -> None:
        self.path = path
        self._idle: list[_Link] = []

    async def send(self, method: str, target: str, headers: list[tuple[bytes, bytes]],
                   body: bytes) -> Answer:
        link = self._take()
        if link is not None:
            # a kept connection the daemon has closed meanwhile fails before any answer:
            # the request then goes once more on a new one (the daemon never saw it)
            with contextlib.suppress(DaemonUnavailable):
                return await self._exchange(link, method, target, headers, body)
        return await self._exchange(await self._open(), method, target, headers, body)

    async def _open(self) -> _Link:
        try:
            return _Link(*await asyncio.open_unix_connection(self.path))
        except OSError as e:
            raise DaemonUnavailable(f"the daemon is not answering on {self.path}: "
                                    f"{e.strerror or e}") from e

    async def _exchange(self, link: _Link, method: str, target: str,
                        headers: list[tuple[bytes, bytes]], body: bytes) -> Answer:
        c = link.h11
        try:
            link.writer.write(
                c.send(h11.Request(method=method, target=target, headers=[
                    (b"host", b"rota"), (b"content-length", str(len(body)).encode()),
                    *headers]))
                + (c.send(h11.Data(data=body)) if body else b"")
                + c.send(h11.EndOfMessage()))
            head = await link.next_event()
        except (OSError, h11.ProtocolError) as e:
            link.close()
            raise DaemonUnavailable(f"the daemon did not answer: {e}") from e
        if not isinstance(head, h11.Response):
            link.close()
            raise DaemonUnavailable("the daemon closed the connection without an answer")
        return Answer(self, link, head)

    def _take(self) -> _Link | None:
        now = time.monotonic()
        while self._idle:
            link = self._idle.pop()
            if now - link.idle_since < KEEP_IDLE_S:
                return link
            link.close()
        return None

    def release(self, link: _Link, *, reusable: bool) -> None:
        if reusable and link.h11.our_state is h11.DONE and link.h11.their_state is h11.DONE:
            link.h11.start_next_cycle()
            link.idle_since = time.monotonic()
            self._idle.append(link)
        else:
            link.close()

    def close(self) -> None:
        for link in self._idle:
            link.close()
        self._idle.clear()


log = logging.getLogger("rota.api_worker")


def build_worker_app(settings: Settings, store: Store, daemon: DaemonLinks,
                     requests: Histogram) -> FastAPI:
    app = FastAPI(title="Rota", version=__version__, docs_url=None, redoc_url=None,
                  openapi_url=None)  # the daemon's document, forwarded, is the one
    app.add_middleware(BodyLimit, limit=settings.max_request_bytes)  # before forwarding
    app.add_middleware(PointRequestsFirst)  # inside the timer: its wait is timed
    app.add_middleware(RequestTimer, histogram=requests)
    auth = Authenticator(store, settings.user, time.time, read_only=True)

    async def who(request: Request) -> Principal:
        return auth.principal("tcp", request.headers.get("authorization"))

    answer_errors_as_problems(app)

    async def facts_of(rows: Sequence[JobRecord]) -> list[dict[str, Any]]:
        live = [r.id for r in rows if needs_live_facts(r, settings.mlflow)]
        got: dict[str, dict[str, Any]] = {}
        if live:
            answer = await daemon.send("POST", "/v1/live", [
                (b"content-type", b"application/json")], json.dumps({"ids": live}).encode())
            data = await answer.read()
            if answer.head.status_code != 200:
                raise DaemonUnavailable(f"the daemon did not give the jobs' live state: "
                                        f"{answer.head.status_code} {data[:200]!r}")
            got = json.loads(data)["facts"]
        return [got.get(str(r.id)) or stored_facts(r) for r in rows]

    app.state.reads = job_reads.StoredJobs(store, facts_of)  # what job_reads reads
    app.include_router(job_reads.router, dependencies=[Depends(who)])

    @app.api_route("/{path:path}", methods=_METHODS, include_in_schema=False)
    async def forward(request: Request) -> Response:
        """Everything else, to the daemon's socket as it came (its answer streamed back)."""
        headers = [(k, v) for k, v in request.headers.raw
                   if k.lower() not in _HOP and k.lower() != b"content-length"]
        headers.append((VIA_HEADER.encode(), b"tcp"))
        scope = request.scope
        target = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1") + (
            f"?{scope['query_string'].decode('latin-1')}" if scope["query_string"] else "")
        answer = await daemon.send(request.method, target, headers, await request.body())
        back: dict[str, str] = {}
        sized = False
        for k, v in answer.head.headers:  # h11 gives names in lower case
            if k == _ROUTE:
                scope[FORWARDED_ROUTE_KEY] = v.decode("latin-1")
            elif k not in _HOP:
                back[k.decode("latin-1")] = v.decode("latin-1")
                sized = sized or k == b"content-length"
        if sized:  # the whole answer at once: a StreamingResponse costs more than most
            # requests (a task to watch for the client leaving)
            body = await answer.read()
            return Response(body, status_code=answer.head.status_code, headers=back)
        return StreamingResponse(answer.body(), status_code=answer.head.status_code,
                                 headers=back)

    return app


async def report_requests(daemon: DaemonLinks, requests: Histogram, slot: int) -> None:
    """Send the daemon this worker's request totals whenever they changed, for /metrics.
    What a worker answered in its last REPORT_S before dying is not counted."""
    sent: Totals = {}
    while True:
        await asyncio.sleep(REPORT_S)
        totals = totals_of(requests)
        if totals == sent:
            continue
        body = json.dumps({"slot": slot, "pid": os.getpid(), "counts": [
            {"labels": key, "buckets": buckets, "sum": total}
            for key, (buckets, total) in totals.items()]}).encode()
        try:
            answer = await daemon.send("POST", "/v1/worker-requests", [
                (b"content-type", b"application/json")], body)
            data = await answer.read()
        except DaemonUnavailable as e:
            log.info("request totals not sent: %s", e)  # sent at the next turn
            continue
        if answer.head.status_code == 200:
            sent = totals
        else:
            log.warning("the daemon refused this worker's request totals: %s %r",
                        answer.head.status_code, data[:200])


async def _serve(settings: Settings, listener: socket.socket, daemon_pid: int,
                 slot: int) -> None:
    import uvicorn

    store = Store(make_engine(settings.db_url))  # the daemon has migrated it
    daemon = DaemonLinks(str(settings.socket_path))
    requests = request_histogram(CollectorRegistry())
    app = build_worker_app(settings, store, daemon, requests)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                           lifespan="off", timeout_graceful_shutdown=2))

    async def leave_with_the_daemon() -> None:
        # its socket would otherwise keep the port and answer for a daemon that is gone;
        # the daemon's pid comes from the daemon (read here, the parent might already be
        # gone and this process adopted)
        while os.getppid() == daemon_pid:
            await asyncio.sleep(PARENT_CHECK_S)
        server.should_exit = True

    tasks = [asyncio.create_task(leave_with_the_daemon()),
             asyncio.create_task(report_requests(daemon, requests, slot))]
    try:
        await server.serve(sockets=[listener])
    finally:
        for task in tasks:
            task.cancel()
        daemon.close()
        store.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rota.server.api_worker")
    p.add_argument("--fd", type=int, required=True, help="the listening TCP socket's fd")
    p.add_argument("--daemon-pid", type=int, required=True,
                   help="the daemon's pid: the worker leaves when it is no longer its parent")
    p.add_argument("--slot", type=int, default=0,
                   help="which of the daemon's workers this is (a restarted one keeps it)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = Settings.model_validate_json(sys.stdin.read())
    listener = socket.socket(fileno=args.fd)
    from rota.server.serve import run_loop

    run_loop(_serve(settings, listener, args.daemon_pid, args.slot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
