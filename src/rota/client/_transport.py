"""The asyncio transport (httpx): requests to the daemon from async code. Blocking code
uses :mod:`rota.client._wire` (standard library only); both share
:class:`~rota.client._endpoint.Endpoint` and its error mapping.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from rota.client._endpoint import DEFAULT_TIMEOUT, Endpoint, decode, error_from
from rota.errors import DaemonUnavailable

__all__ = ["DEFAULT_TIMEOUT", "AsyncTransport", "Endpoint", "TimeoutTypes"]

TimeoutTypes = float | httpx.Timeout | None

#: What the layer below raises when the daemon cannot be reached.
_UNREACHABLE = (httpx.TransportError, FileNotFoundError, ConnectionRefusedError)


def _unavailable(endpoint: Endpoint, e: Exception) -> DaemonUnavailable:
    if isinstance(e, httpx.TimeoutException) and not isinstance(e, httpx.ConnectTimeout):
        return endpoint.too_slow(e)
    if isinstance(e, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        return endpoint.broken(e)
    return endpoint.not_answering(e)


def _with_read(base: httpx.Timeout, read: Any) -> httpx.Timeout:
    """``base`` with another read limit (seconds or None; an httpx.Timeout is kept)."""
    if isinstance(read, httpx.Timeout):
        return read
    return httpx.Timeout(base.connect, read=read, write=base.write, pool=base.pool)


class AsyncTransport:
    """Requests to the daemon from asyncio code (or trio, through anyio)."""

    def __init__(self, endpoint: Endpoint, timeout: TimeoutTypes = DEFAULT_TIMEOUT) -> None:
        self.endpoint = endpoint
        opts: dict[str, Any] = {"base_url": endpoint.base_url, "headers": endpoint.headers(),
                                "timeout": timeout}
        if endpoint.socket_path is not None:
            opts["transport"] = httpx.AsyncHTTPTransport(uds=str(endpoint.socket_path))
        self._http = httpx.AsyncClient(**opts)

    @property
    def timeout(self) -> float | None:
        """The read limit of one request, in seconds (None: none)."""
        return self._http.timeout.read

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        if "timeout" in kw:
            kw["timeout"] = _with_read(self._http.timeout, kw["timeout"])
        try:
            resp = await self._http.request(method, path, **kw)
        except _UNREACHABLE as e:
            raise _unavailable(self.endpoint, e) from e
        return decode(resp.status_code, resp.content, resp.reason_phrase)

    @asynccontextmanager
    async def stream(self, method: str, path: str, **kw: Any) -> AsyncIterator[httpx.Response]:
        """An open streaming answer (errors already raised); reads may wait forever."""
        try:
            async with self._http.stream(method, path, timeout=_with_read(self._http.timeout,
                                                                          None),
                                         **kw) as resp:
                if resp.status_code >= 400:
                    await resp.aread()
                    raise error_from(resp.status_code, resp.content, resp.reason_phrase)
                yield resp
        except _UNREACHABLE as e:
            raise _unavailable(self.endpoint, e) from e

    async def aclose(self) -> None:
        await self._http.aclose()
