"""Who is on the other end of the daemon's Unix socket, as the kernel says (SO_PEERCRED).

Nothing the client sends can change it: the kernel records the connecting process's uid
when it connects. Uvicorn builds each request's ASGI scope from its connection's protocol
object, copying ``app_state`` into ``scope["state"]``; a protocol subclass that reads the
peer's uid once per connection and adds it there hands it to every request on that
connection, whichever HTTP implementation uvicorn uses.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import MutableMapping
from typing import Any

#: the key in ``scope["state"]`` that holds the peer's uid (absent: no Unix peer)
PEER_UID = "rota.peer_uid"
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_uid(sock: socket.socket | None) -> int | None:
    """The uid of the process at the other end of a Unix socket; None for other sockets."""
    if sock is None or sock.family != socket.AF_UNIX:
        return None
    try:
        _pid, uid, _gid = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                       _CRED.size))
    except OSError:
        return None
    return uid


def peer_aware(protocol: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
    """``protocol`` (a uvicorn HTTP protocol class) whose requests carry the peer's uid."""

    class PeerAware(protocol):  # type: ignore[valid-type,misc]
        def connection_made(self, transport: asyncio.Transport) -> None:
            uid = peer_uid(transport.get_extra_info("socket"))
            if uid is not None:
                # a per-connection copy: the app_state dict is shared by all connections
                self.app_state: dict[str, Any] = {**self.app_state, PEER_UID: uid}
            super().connection_made(transport)

    PeerAware.__name__ = f"PeerAware{protocol.__name__}"
    return PeerAware


def scope_peer_uid(scope: MutableMapping[str, Any]) -> int | None:
    state = scope.get("state")
    return state.get(PEER_UID) if isinstance(state, dict) else None
