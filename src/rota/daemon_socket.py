"""The daemon socket a client reaches when it is given none: as
``rota.config.load_settings().socket_path`` would say, found with os.path alone in the
common cases (every CLI call needs it, and reading the full settings costs tens of ms), or
the machine's system daemon when this user runs none of their own."""

from __future__ import annotations

import os

from rota import home as _home


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
    home = _home.home_dir()
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
        system = os.path.join(_home.SYSTEM_HOME, "rota.sock")
        if os.path.exists(system):  # no daemon of one's own: the machine's
            return system
    return own


def _from_settings() -> str:
    from rota.config import load_settings

    return str(load_settings().socket_path)
