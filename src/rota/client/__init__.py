"""Talking to a Rota daemon from Python.

The public SDK is :class:`rota.Client` / :class:`rota.AsyncClient` (pydantic models); this
package also holds :class:`RawClient`, the typed wire client the CLI uses: the daemon's
JSON as plain dicts, typed by the TypedDicts of :mod:`rota.answers`.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, without importing typing (rota.cli starts faster)
if TYPE_CHECKING:
    from typing import Any


if TYPE_CHECKING:
    from rota.client.raw import RawClient

__all__ = ["RawClient"]


def __getattr__(name: str) -> Any:
    # lazy, so that importing rota.client.models does not pull in httpx
    if name == "RawClient":
        from rota.client.raw import RawClient

        return RawClient
    raise AttributeError(f"module 'rota.client' has no attribute {name!r}")
