"""Backend by name, as a job's ``session`` field and the daemon's config spell it."""

from __future__ import annotations

from rota.backends.base import Backend
from rota.errors import BackendError

CHOICES = ("local", "none", "tmux", "screen")


def make_backend(name: str, *, tmux_socket: str = "rota",
                 screendir: str | None = None) -> Backend:
    """The backend called ``name``; "none" (no session) is the plain local backend.

    Modules are imported here, on demand, so that choosing one backend never imports the
    others (later engines bring optional SDKs).
    """
    if name in ("local", "none"):
        from rota.backends.local import LocalBackend

        return LocalBackend()
    if name == "tmux":
        from rota.backends.sessions import TmuxBackend

        return TmuxBackend(socket_name=tmux_socket)
    if name == "screen":
        from rota.backends.sessions import ScreenBackend

        return ScreenBackend(screendir=screendir)
    raise BackendError(f"unknown backend {name!r}; choose one of: {', '.join(CHOICES)}")
