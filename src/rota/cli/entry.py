"""The `rota` console script: ``rota --version`` answers before anything is imported (the
version is a constant of the package), everything else goes to :mod:`rota.cli.main`."""

from __future__ import annotations

import sys


def main() -> int | None:
    if sys.argv[1:] == ["--version"]:
        from rota import __version__

        sys.stdout.write(f"rota {__version__}\n")
        return 0
    from rota.cli.main import app

    result: int | None = app()
    return result
