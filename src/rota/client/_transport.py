"""The one way to reach a daemon: where (Unix socket or URL), who (bearer token), and how
its answers become Python values or Rota's errors. Every client sits on top of this.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from rota.errors import (
    Conflict,
    DaemonUnavailable,
    Forbidden,
    InvalidSpec,
    NotFound,
    RotaError,
    Unauthorized,
)

#: Seconds for one request unless the caller says otherwise.
DEFAULT_TIMEOUT = 30.0

TimeoutTypes = float | httpx.Timeout | None

_BY_STATUS: dict[int, type[RotaError]] = {
    401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 422: InvalidSpec,
    503: DaemonUnavailable,
}


@dataclass(frozen=True)
class Endpoint:
    """Where the daemon is and how to prove who we are."""

    base_url: str
    socket_path: Path | None = None
    token: str | None = None

    @classmethod
    def resolve(cls, socket_path: str | os.PathLike[str] | None = None, *,
                url: str | None = None, token: str | None = None) -> Endpoint:
        """Pick the daemon: an explicit ``url`` or ``socket_path``; else ``$ROTA_URL``;
        else the socket of the daemon of the current ROTA_HOME. The token is ``token`` or
        ``$ROTA_TOKEN``."""
        if socket_path is not None and url is not None:
            raise ValueError("give socket_path or url, not both")
        if token is None:
            token = os.environ.get("ROTA_TOKEN") or None
        if socket_path is None and url is None:
            url = os.environ.get("ROTA_URL") or None
        if url is not None:
            return cls(base_url=url.rstrip("/"), token=token)
        if socket_path is None:
            from rota.config import load_settings  # read only when needed: it parses rota.toml

            socket_path = load_settings().socket_path
        return cls(base_url="http://rota", socket_path=Path(socket_path), token=token)

    @property
    def where(self) -> str:
        return f"on {self.socket_path}" if self.socket_path else f"at {self.base_url}"

    def http_options(self, timeout: TimeoutTypes) -> dict[str, Any]:
        """Keyword arguments shared by httpx.Client and httpx.AsyncClient."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return {"base_url": self.base_url, "headers": headers, "timeout": timeout}

    def unavailable(self, e: Exception) -> DaemonUnavailable:
        """The error for a daemon that cannot be reached, saying how to start one."""
        if isinstance(e, httpx.TimeoutException) and not isinstance(e, httpx.ConnectTimeout):
            return DaemonUnavailable(f"the daemon {self.where} did not answer in time ({e})")
        if isinstance(e, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
            return DaemonUnavailable(f"the connection to the daemon {self.where} broke ({e})")
        if self.socket_path is not None:
            return DaemonUnavailable(
                f"no Rota daemon is answering on {self.socket_path}. Start one with "
                "`rota server --detach` (or `rota server` in another terminal).")
        return DaemonUnavailable(
            f"no Rota daemon is answering at {self.base_url} ({e}). Start one there with "
            "`rota server --listen HOST:PORT`, or check ROTA_URL.")


#: What the layer below raises when the daemon cannot be reached.
_UNREACHABLE = (httpx.TransportError, FileNotFoundError, ConnectionRefusedError)


def error_from(resp: httpx.Response) -> RotaError:
    """Turn an error answer (problem+json: title, status, detail, field) into Rota's error."""
    try:
        body = resp.json()
        detail = body.get("detail") or resp.text
        field = body.get("field")
    except (ValueError, AttributeError):
        detail, field = resp.text or resp.reason_phrase, None
    cls = _BY_STATUS.get(resp.status_code, RotaError)
    if cls is InvalidSpec:
        return InvalidSpec(str(detail), field=field)
    return cls(str(detail))


def decode(resp: httpx.Response) -> Any:
    if resp.status_code >= 400:
        raise error_from(resp)
    if resp.status_code == 204 or not resp.content:
        return None
    return resp.json()


def streaming(timeout: httpx.Timeout) -> httpx.Timeout:
    """The timeout for a stream that may stay quiet for hours: no limit between reads."""
    return httpx.Timeout(timeout.connect, read=None, write=timeout.write, pool=timeout.pool)


class SyncTransport:
    """Requests to the daemon from blocking code."""

    def __init__(self, endpoint: Endpoint, timeout: TimeoutTypes = DEFAULT_TIMEOUT) -> None:
        self.endpoint = endpoint
        opts = endpoint.http_options(timeout)
        if endpoint.socket_path is not None:
            opts["transport"] = httpx.HTTPTransport(uds=str(endpoint.socket_path))
        self._http = httpx.Client(**opts)

    @property
    def timeout(self) -> httpx.Timeout:
        return self._http.timeout

    def request(self, method: str, path: str, **kw: Any) -> Any:
        """Send one request; answer its JSON body or raise Rota's error."""
        try:
            resp = self._http.request(method, path, **kw)
        except _UNREACHABLE as e:
            raise self.endpoint.unavailable(e) from e
        return decode(resp)

    @contextmanager
    def stream(self, method: str, path: str, **kw: Any) -> Iterator[httpx.Response]:
        """An open streaming answer (errors already raised); reads may wait forever."""
        try:
            with self._http.stream(method, path, timeout=streaming(self.timeout), **kw) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    raise error_from(resp)
                yield resp
        except _UNREACHABLE as e:
            raise self.endpoint.unavailable(e) from e

    def close(self) -> None:
        self._http.close()


class AsyncTransport:
    """Requests to the daemon from asyncio code (or trio, through anyio)."""

    def __init__(self, endpoint: Endpoint, timeout: TimeoutTypes = DEFAULT_TIMEOUT) -> None:
        self.endpoint = endpoint
        opts = endpoint.http_options(timeout)
        if endpoint.socket_path is not None:
            opts["transport"] = httpx.AsyncHTTPTransport(uds=str(endpoint.socket_path))
        self._http = httpx.AsyncClient(**opts)

    @property
    def timeout(self) -> httpx.Timeout:
        return self._http.timeout

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        try:
            resp = await self._http.request(method, path, **kw)
        except _UNREACHABLE as e:
            raise self.endpoint.unavailable(e) from e
        return decode(resp)

    @asynccontextmanager
    async def stream(self, method: str, path: str, **kw: Any) -> AsyncIterator[httpx.Response]:
        try:
            async with self._http.stream(method, path, timeout=streaming(self.timeout),
                                         **kw) as resp:
                if resp.status_code >= 400:
                    await resp.aread()
                    raise error_from(resp)
                yield resp
        except _UNREACHABLE as e:
            raise self.endpoint.unavailable(e) from e

    async def aclose(self) -> None:
        await self._http.aclose()
