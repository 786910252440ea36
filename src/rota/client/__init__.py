"""Talking to a Rota daemon from Python.

The public SDK is :class:`rota.Client` / :class:`rota.AsyncClient` (pydantic models); this
package also holds :class:`RawClient`, the typed wire client the CLI uses: the daemon's
JSON as plain dicts, typed by the TypedDicts of :mod:`rota.answers`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rota.client.raw import RawClient

__all__ = ["RawClient"]


def __getattr__(name: str) -> Any:
    # lazy, so that importing rota.client.models does not pull in httpx
    if name == "RawClient":
        from rota.client.raw import RawClient

        return RawClient
    raise AttributeError(f"module 'rota.client' has no attribute {name!r}")
