"""A bound on request bodies (the ``max_request_bytes`` setting).

Without one, a 60 MB submit was parsed whole: the daemon grew from 178 to 525 MB and the
store by 150 MB. A body that declares a larger Content-Length is refused before any of it
is read; a chunked one (no length) is read ahead, counted, and refused as soon as it passes
the limit, so no more than the limit is ever held. The answer is a 413 problem+json like
every other error, naming the limit and the setting that raises it.

Before that answer, up to DRAIN_BYTES more of the body are read and dropped (memory stays
flat): a client still sending when the connection closes would otherwise see a broken pipe
or a reset (TCP drops what it had not read yet) instead of the answer. A longer body is
answered at once, and the connection closed.

Plain ASGI (BaseHTTPMiddleware would cost more than many requests take); used by the
daemon's app and by the API workers' (a worker refuses before forwarding).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rota.errors import RequestTooLarge
from rota.server.api.problems import problem

#: the setting that raises the limit, as an error names it
SETTING = "max_request_bytes (ROTA_MAX_REQUEST_BYTES, or max_request_bytes in rota.toml)"


#: how much of a refused body is read and dropped so that its client reads the answer
DRAIN_BYTES = 64 << 20


def too_large_text(limit: int) -> str:
    return (f"the request body is larger than {limit / (1 << 20):g} MiB ({limit} bytes), "
            f"the most this daemon takes; send fewer jobs per submit, or raise "
            f"{SETTING} and restart the daemon")


def _declared_length(scope: Scope) -> tuple[int | None, bool]:
    """(Content-Length, whether the body is chunked) from the request's headers."""
    length: int | None = None
    chunked = False
    for k, v in scope["headers"]:
        if k == b"content-length" and v.strip().isdigit():
            length = int(v)
        elif k == b"transfer-encoding" and b"chunked" in v.lower():
            chunked = True
    return length, chunked


class BodyLimit:
    """ASGI middleware: refuse request bodies over ``limit`` bytes with a 413."""

    def __init__(self, app: ASGIApp, *, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length, chunked = _declared_length(scope)
        if length is not None and length > self.limit:
            await self._refuse(scope, receive, send, drain=length <= DRAIN_BYTES)
            return
        if length is not None or not chunked:
            # the server frames the body at its declared length (none: no body)
            await self.app(scope, receive, send)
            return
        ahead: list[Message] = []
        got = 0
        while True:
            message = await receive()
            ahead.append(message)
            if message["type"] != "http.request":
                break  # the client left: the app learns it from the replay
            got += len(message.get("body", b""))
            if got > self.limit:
                more = message.get("more_body", False)
                await self._refuse(scope, receive, send, drain=more)
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(ahead, receive), send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, *,
                      drain: bool) -> None:
        dropped = 0
        while drain and dropped <= DRAIN_BYTES:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left: nobody to answer
            dropped += len(message.get("body", b""))
            drain = message.get("more_body", False)
        e = RequestTooLarge(too_large_text(self.limit))
        # the unread rest of the body makes the connection unusable: the client is told
        answer = problem(e.http_status, type(e).__name__, str(e),
                         headers={"connection": "close"})
        await answer(scope, receive, send)


def _replay(ahead: list[Message], receive: Receive) -> Receive:
    """``receive`` giving the messages read ahead first, then the server's own."""
    pending = list(reversed(ahead))

    async def replay() -> Message:
        if pending:
            return pending.pop()
        return await receive()
    return replay
