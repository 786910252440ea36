"""Where this user's Rota lives (ROTA_HOME), cheap to import: every CLI call needs it (to
find the daemon's socket, ``rota.daemon_socket``), and reading the full settings
(rota.config) costs tens of ms. os.path alone (pathlib costs ~4 ms of every CLI call)."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing's, without importing typing (rota.cli starts faster)

if TYPE_CHECKING:
    from pathlib import Path


#: the home of a system daemon (`rota server install --system`, run as root): its socket is
#: the one a user's CLI reaches when the user runs no daemon of their own
SYSTEM_HOME = "/var/lib/rota"


def home_dir() -> str:
    """ROTA_HOME as a string (``default_home`` as a Path)."""
    env = os.environ.get("ROTA_HOME")
    if env:
        return os.path.expanduser(env)
    xdg = os.environ.get("XDG_DATA_HOME")
    base = (os.path.expanduser(xdg) if xdg
            else os.path.join(os.path.expanduser("~"), ".local", "share"))
    return os.path.join(base, "rota")


def default_home() -> Path:
    from pathlib import Path

    return Path(home_dir())
