"""`rota ... --help` from a cache of Typer's own output.

Typer renders help with Rich after building every command (~150-300 ms). The text only
changes with the code, the terminal and a few environment variables, so the first
`rota X --help` is rendered by Typer as usual (and shown while it is written) and saved;
later ones print the saved text. An entry is used only when everything that shaped it
still holds: the key (command path, program name, terminal width, whether stdout is a
terminal, the environment variables Rich, Typer and Rota read) names the file, and the
entry lists the source files of every Rota, Typer, Click and Rich module loaded while
rendering, with their mtime and size, checked on each use (a few dozen stat calls).

Only ``[COMMAND...] --help`` is taken, where COMMAND... turned out to be a command path
when it was rendered (so `rota submit train --help`, a job's own `--help`, is never one).
The cache lives in $XDG_CACHE_HOME/rota/help (default ~/.cache/rota/help); when it cannot
be written, help is simply rendered each time.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import zlib
from collections.abc import Callable
from typing import Any, TextIO

#: environment variables that change what Rich/Typer print (colour, width, markup)
_ENV = ("COLUMNS", "LINES", "TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "CLICOLOR",
        "CLICOLOR_FORCE", "TERMINAL_WIDTH", "FORCE_TERMINAL", "TTY_COMPATIBLE",
        "TTY_INTERACTIVE", "TYPER_USE_RICH", "_TYPER_FORCE_DISABLE_TERMINAL",
        "JUPYTER_COLUMNS", "JUPYTER_LINES", "GITHUB_ACTIONS", "LANG", "LC_ALL")
#: packages whose loaded modules' files are checked: their code shapes the text
_PACKAGES = ("rota", "typer", "click", "rich")
_WORD = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")


def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "rota", "help")


def key_for(argv: list[str], prog: str) -> str | None:
    """The cache key of ``argv`` (without the program name): everything the text depends
    on besides the code, as a string; None when it is not a plain ``[COMMAND...] --help``."""
    if not argv or argv[-1] != "--help":
        return None
    path = argv[:-1]
    if any(not w or w[0] == "-" or not _WORD.issuperset(w) for w in path):
        return None
    width = ""
    for fd in (0, 1, 2):  # where Rich looks for the terminal's size
        try:
            width = str(os.get_terminal_size(fd).columns)
            break
        except (OSError, ValueError):
            continue
    env = {k: v for k, v in os.environ.items() if k in _ENV or k.startswith("ROTA_")}
    parts = [prog, path, width, sys.stdout.isatty(), sorted(env.items()), sys.version]
    return json.dumps(parts)


def _file(key: str) -> str:
    # a short name; the entry holds the whole key, so a clash is only a miss
    return os.path.join(cache_dir(), f"{zlib.crc32(key.encode()):08x}.json")


def show(key: str) -> bool:
    """Print the saved help for ``key`` if it is still valid; False on a miss."""
    try:
        with open(_file(key), encoding="utf-8") as f:
            entry = json.load(f)
        if entry["key"] != key:
            return False
        for path, (mtime, size) in entry["files"].items():
            st = os.stat(path)
            if st.st_mtime_ns != mtime or st.st_size != size:
                return False
        text = entry["text"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    sys.stdout.write(text)
    sys.stdout.flush()
    return True


class _Tee:
    """stdout as Rich sees it (same terminal, encoding, fileno), also kept in a list."""

    def __init__(self, real: TextIO) -> None:
        self._real = real
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # Click probes for a binary stream with b""
            raise TypeError("write() argument must be str")
        self.parts.append(text)
        return self._real.write(text)

    def __getattr__(self, name: str) -> Any:
        if name == "buffer":  # so that nothing writes around the copy
            raise AttributeError(name)
        return getattr(self._real, name)


def render(key: str, run: Callable[[], Any], is_path: Callable[[], bool]) -> Any:
    """Run Typer (``run``) on a help request, saving what it prints when it printed help
    (exit status 0) for a real command path (``is_path``, asked after the run)."""
    real = sys.stdout
    tee = _Tee(real)
    sys.stdout = tee
    code: Any = None
    try:
        code = run()
    except SystemExit as e:
        code = e.code
        raise
    finally:
        sys.stdout = real
        if code in (0, None) and tee.parts and is_path():
            _save(key, "".join(tee.parts))
    return code


def _save(key: str, text: str) -> None:
    files: dict[str, tuple[int, int]] = {}
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] not in _PACKAGES:
            continue
        path = getattr(module, "__file__", None)
        if not path:
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue
        files[path] = (st.st_mtime_ns, st.st_size)
    target = _file(key)
    tmp = f"{target}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"key": key, "files": files, "text": text}, f)
        os.replace(tmp, target)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
