"""What every command shares: settings, the client, --json output, error handling.

Cheap to import (the fast lane of `rota submit` goes through here): Rich and the settings
are loaded when first used; ``console`` and ``err_console`` are made on first access.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from rota.cli.lazy_typer import Exit
from rota.cli.styled import Lines, colour_for
from rota.cli.user_text import prose
from rota.client.raw import RawClient as Client
from rota.errors import DaemonUnavailable, InvalidSpec, RotaError, StoreError

TYPE_CHECKING = False  # typing's, without importing typing (rota.cli starts faster)
if TYPE_CHECKING:
    from typing import Any, TypeVar, overload

if TYPE_CHECKING:
    from rich.console import Console

    from rota.config import Settings

    console: Console
    err_console: Console

if TYPE_CHECKING:  # annotations only (they are strings at run time)
    T = TypeVar("T")
    #: an answer the daemon gives for one target (rota.answers)
    R = TypeVar("R")



class Plain(str):
    """Text that :func:`emit` prints as it is (never read as markup; control characters
    escaped, as every string a command prints is: rota.cli.user_text)."""


def __getattr__(name: str) -> Any:
    if name in ("console", "err_console"):
        from rota.cli.user_text import make_console

        made = make_console(stderr=name == "err_console")
        globals()[name] = made
        return made
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load(**overrides: Any) -> Settings:
    from rota.config import load_settings

    return load_settings(**overrides)


def client() -> Client:
    """The daemon at $ROTA_URL (with $ROTA_TOKEN) when set, else this ROTA_HOME's socket."""
    return Client()


if TYPE_CHECKING:  # (typing.overload, without importing typing at run time)
    @overload
    def emit(data: dict[str, Any], json_out: bool,
             human: Callable[[dict[str, Any]], Any]) -> None: ...
    @overload
    def emit(data: T, json_out: bool, human: Callable[[T], Any]) -> None: ...
def emit(data: Any, json_out: bool, human: Callable[[Any], Any]) -> None:
    """Print JSON for programs (exact: JSON escapes control characters), or the human
    rendering (a string, Lines or a Rich renderable) of the same ``data``, where a user's
    text is only text (rota.cli.user_text). A typed answer (rota.answers) keeps its type in
    ``human``, so mypy checks the keys it reads; a plain dict made here stays a plain dict."""
    if json_out:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
        return
    out = human(data)
    if out is None:
        return
    if isinstance(out, Lines):  # its parts are escaped as it renders them
        sys.stdout.write(out.render(colour_for(sys.stdout)) + "\n")
        return
    if isinstance(out, str):  # words, never markup (Rich is not needed to print them)
        sys.stdout.write(prose(out) + "\n")
        return
    text = getattr(out, "plain", None)
    if isinstance(text, str) and not out.spans and not out.style:
        sys.stdout.write(prose(text) + "\n")  # an unstyled rich Text
        return
    _console("console").print(out, soft_wrap=True)


def _console(name: str) -> Console:
    made: Console = __getattr__(name) if name not in globals() else globals()[name]
    return made


def _plain_stderr() -> bool:
    """Whether stderr gets no colours anyway (then Rich is not needed to write to it)."""
    return not sys.stderr.isatty()


def warn(message: str) -> None:
    """A warning on stderr (``message`` is words: never markup, control characters
    escaped, for it may quote a user's value)."""
    _said("warning:", "bold yellow", message)


def fail(message: str) -> None:
    """An error line on stderr (``message`` as for :func:`warn`)."""
    _said("error:", "bold red", message)


def _said(label: str, style: str, message: str) -> None:
    if _plain_stderr():
        sys.stderr.write(f"{label} {prose(message)}\n")
        return
    from rich.text import Text

    _console("err_console").print(Text.assemble((label, style), " ", message),
                                  soft_wrap=True)


def confirm(question: str) -> bool:
    """Ask ``question [y/N]:`` on stderr; only y or yes is yes (no answer, end of input
    or Ctrl-C: no). The prompt's line is always ended: a terminal echoes the newline of a
    typed answer, but a pipe, a closed stdin or Ctrl-C leaves the line open, and what is
    said next would follow on it."""
    sys.stderr.write(f"{question} [y/N]: ")
    sys.stderr.flush()
    try:
        answer = sys.stdin.readline()
    except KeyboardInterrupt:
        answer = ""
    if not (answer.endswith("\n") and sys.stdin.isatty()):
        sys.stderr.write("\n")
    return answer.strip().lower() in ("y", "yes")


@contextmanager
def run_cli(*, json_out: bool) -> Iterator[None]:
    """Turn Rota's errors into a clear message and an exit code (2 bad input, 3 no daemon)."""
    try:
        yield
    except InvalidSpec as e:
        _report(e, json_out, 2)
    except (DaemonUnavailable, StoreError) as e:  # the daemon cannot do it now
        _report(e, json_out, 3)
    except RotaError as e:
        _report(e, json_out, 1)


def _report(e: RotaError, json_out: bool, code: int) -> None:
    if json_out:
        sys.stdout.write(json.dumps({"error": type(e).__name__, "message": str(e),
                                     "field": getattr(e, "field", None)}) + "\n")
    else:
        fail(str(e))
    raise Exit(code)


def apply_each(targets: Sequence[T], key: str, json_out: bool,
               act: Callable[[Client, T], R], done: Callable[[R], str],
               label: Callable[[T], Any] = lambda t: t) -> None:
    """Apply one action to several jobs or GPUs; report each; exit 1 if any of them failed
    (the others are still done).

    An error entry names its target as ``{key: label(target)}`` ("id" for jobs, "index"
    for GPUs).
    """
    with run_cli(json_out=json_out):
        results: list[R | dict[str, Any]] = []  # an answer, or an error entry
        lines: list[tuple[bool, str]] = []  # (failed, what to say), said once all are done
        with client() as c:
            for t in targets:
                try:
                    r = act(c, t)
                except (DaemonUnavailable, StoreError):  # the next target's would fail too
                    raise
                except RotaError as e:
                    results.append({key: label(t), "error": type(e).__name__,
                                    "message": str(e)})
                    lines.append((True, str(e)))
                    continue
                results.append(r)
                if not json_out:
                    lines.append((False, done(r)))
        if json_out:
            emit(results, True, str)
        else:
            for failed, line in lines:
                if failed:
                    fail(line)
                else:
                    sys.stdout.write(prose(line) + "\n")
        if any(failed for failed, _ in lines):
            raise Exit(1)
