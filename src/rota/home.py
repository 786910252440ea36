"""Where this user's Rota lives (ROTA_HOME) and its daemon's socket, cheap to import: every
CLI call needs the socket, and reading the full settings (rota.config) costs tens of ms."""

from __future__ import annotations

import os
from pathlib import Path


def default_home() -> Path:
    env = os.environ.get("ROTA_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "rota"


def socket_path() -> Path:
    """The daemon's socket, as ``rota.config.load_settings().socket_path`` would say.

    ``home`` comes from $ROTA_HOME, a ``.env`` file in this directory, or rota.toml; when
    ROTA_HOME is set it wins, as in the settings. A ``.env`` file or a ``home`` in rota.toml
    is rare: then the settings are read in full.
    """
    env = os.environ.get("ROTA_HOME")
    if env is not None:
        return Path(env) / "rota.sock"
    if os.path.exists(".env") or any(k.upper() == "ROTA_HOME" for k in os.environ):
        return _from_settings()
    home = default_home()
    toml = home / "rota.toml"
    if toml.exists():
        import tomllib

        try:
            overridden = "home" in tomllib.loads(toml.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            overridden = True  # the settings say what is wrong with it
        if overridden:
            return _from_settings()
    return home / "rota.sock"


def _from_settings() -> Path:
    from rota.config import load_settings

    return load_settings().socket_path
