"""Where this user's Rota lives (ROTA_HOME) and its daemon's socket, cheap to import: every
CLI call needs the socket, and reading the full settings (rota.config) costs tens of ms.
The socket is found with os.path alone (pathlib costs ~4 ms of every CLI call)."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing's, without importing typing (rota.cli starts faster)

if TYPE_CHECKING:
    from pathlib import Path


#: the home of a system daemon (`rota server install --system`, run as root): its socket is
#: the one a user's CLI reaches when the user runs no daemon of their own
SYSTEM_HOME = "/var/lib/rota"


def _home_dir() -> str:
    env = os.environ.get("ROTA_HOME")
    if env:
        return os.path.expanduser(env)
    xdg = os.environ.get("XDG_DATA_HOME")
    base = (os.path.expanduser(xdg) if xdg
            else os.path.join(os.path.expanduser("~"), ".local", "share"))
    return os.path.join(base, "rota")


def default_home() -> Path:
    from pathlib import Path

    return Path(_home_dir())


def socket_path() -> str:
    """The daemon's socket, as ``rota.config.load_settings().socket_path`` would say.

    ``home`` comes from $ROTA_HOME, a ``.env`` file in this directory, or rota.toml; when
    ROTA_HOME is set it wins, as in the settings. A ``.env`` file or a ``home`` in rota.toml
    is rare: then the settings are read in full.
    """
    env = os.environ.get("ROTA_HOME")
    if env is not None:
        return os.path.join(env, "rota.sock")
    if os.path.exists(".env") or any(k.upper() == "ROTA_HOME" for k in os.environ):
        return _from_settings()
    home = _home_dir()
    toml = os.path.join(home, "rota.toml")
    if os.path.exists(toml):
        import tomllib

        try:
            with open(toml, encoding="utf-8") as f:
                overridden = "home" in tomllib.loads(f.read())
        except (OSError, ValueError):
            overridden = True  # the settings say what is wrong with it
        if overridden:
            return _from_settings()
    own = os.path.join(home, "rota.sock")
    if not os.path.exists(own):
        system = os.path.join(SYSTEM_HOME, "rota.sock")
        if os.path.exists(system):  # no daemon of one's own: the machine's
            return system
    return own


def _from_settings() -> str:
    from rota.config import load_settings

    return str(load_settings().socket_path)
