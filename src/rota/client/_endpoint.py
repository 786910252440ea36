"""Where the daemon is (Unix socket or URL), who we are (bearer token), and how an error
answer becomes Rota's error. Shared by every transport; imports no HTTP library.
"""

from __future__ import annotations

import json
import os

from rota.errors import (
    Conflict,
    DaemonUnavailable,
    Forbidden,
    InvalidSpec,
    NotFound,
    RequestTooLarge,
    RotaError,
    StoreError,
    Unauthorized,
)

TYPE_CHECKING = False  # typing's, without importing typing (rota.cli starts faster)
if TYPE_CHECKING:
    from typing import Any

if TYPE_CHECKING:
    from pathlib import Path

#: Seconds for one request unless the caller says otherwise.
DEFAULT_TIMEOUT = 30.0

_BY_STATUS: dict[int, type[RotaError]] = {
    401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 413: RequestTooLarge,
    422: InvalidSpec, 503: DaemonUnavailable,
}
#: errors the answer's ``title`` names more closely than its status does (a 503 is the
#: store's failure or an unreachable daemon); only kinds made from a message alone
_BY_TITLE: dict[str, type[RotaError]] = {
    "StoreError": StoreError, "DaemonUnavailable": DaemonUnavailable, "Conflict": Conflict,
    "NotFound": NotFound, "Forbidden": Forbidden, "Unauthorized": Unauthorized,
}


class Endpoint:
    """Where the daemon is and how to prove who we are. (A plain class: dataclasses
    imports inspect, ~10 ms of every CLI call; the socket is kept as a string and made a
    Path only when asked for: pathlib costs ~4 ms of every CLI call.)"""

    __slots__ = ("base_url", "socket_file", "token")

    def __init__(self, base_url: str, socket_path: str | os.PathLike[str] | None = None,
                 token: str | None = None) -> None:
        self.base_url, self.token = base_url, token
        self.socket_file = None if socket_path is None else os.fspath(socket_path)

    @property
    def socket_path(self) -> Path | None:
        """The daemon's Unix socket (None for a daemon reached by URL)."""
        if self.socket_file is None:
            return None
        from pathlib import Path

        return Path(self.socket_file)

    def __repr__(self) -> str:
        return f"Endpoint({self.base_url!r}, socket_path={self.socket_path!r})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Endpoint) and (self.base_url, self.socket_file, self.token)
                == (other.base_url, other.socket_file, other.token))

    def __hash__(self) -> int:
        return hash((self.base_url, self.socket_file, self.token))

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
            from rota.daemon_socket import socket_path as configured

            socket_path = configured()
        return cls(base_url="http://rota", socket_path=socket_path, token=token)

    @property
    def where(self) -> str:
        return f"on {self.socket_file}" if self.socket_file else f"at {self.base_url}"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def not_answering(self, e: Exception) -> DaemonUnavailable:
        """The error for a daemon nobody answers for, saying how to start one."""
        if self.socket_file is not None:
            return DaemonUnavailable(
                f"no Rota daemon is answering on {self.socket_file}. Start one with "
                "`rota server --detach` (or `rota server` in another terminal).")
        return DaemonUnavailable(
            f"no Rota daemon is answering at {self.base_url} ({e}). Start one there with "
            "`rota server --listen HOST:PORT`, or check ROTA_URL.")

    def too_slow(self, e: Exception) -> DaemonUnavailable:
        err = DaemonUnavailable(f"the daemon {self.where} did not answer in time ({e})")
        err.maybe_done = True
        return err

    def broken(self, e: Exception) -> DaemonUnavailable:
        err = DaemonUnavailable(f"the connection to the daemon {self.where} broke ({e})")
        err.maybe_done = True
        return err


def error_from(status: int, body: bytes, reason: str = "") -> RotaError:
    """Turn an error answer (problem+json: title, status, detail, field) into Rota's error."""
    text = body.decode("utf-8", "replace")
    try:
        doc = json.loads(text)
        detail = doc.get("detail") or text
        field, title = doc.get("field"), doc.get("title")
    except (ValueError, AttributeError):
        detail, field, title = text or reason, None, None
    cls = _BY_TITLE.get(title) if isinstance(title, str) else None
    if cls is None or cls.http_status != status:
        cls = _BY_STATUS.get(status, RotaError)
    if issubclass(cls, InvalidSpec):
        return cls(str(detail), field=field)
    return cls(str(detail))


def decode(status: int, body: bytes, reason: str = "") -> Any:
    """The JSON of a successful answer (None when empty); Rota's error for a failed one."""
    if status >= 400:
        raise error_from(status, body, reason)
    if status == 204 or not body:
        return None
    return json.loads(body)
