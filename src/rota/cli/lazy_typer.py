"""The part of Typer a command module needs when it is imported, without importing Typer.

Typer costs ~50 ms to import and, since 0.2x, builds a pydantic adapter per option when a
command runs; a `rota submit` through it took ~450 ms. Command modules therefore write

    from rota.cli import lazy_typer as typer

and declare options as usual (``typer.Option(...)``, ``typer.Argument(...)``,
``raise typer.Exit(code)``). Here ``Option``/``Argument`` only record their arguments;
:func:`realize` turns them into Typer's own objects when the module is registered on the
real app (help, errors, every command the fast lane does not take), and
:mod:`rota.cli.fast` reads the same records to parse a hot command's argv itself. Any
other name (``typer.Context``, ``typer.echo``, ...) is Typer's, imported on first use.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

TYPE_CHECKING = False  # typing's, without importing typing (rota.cli starts faster)
if TYPE_CHECKING:
    from typing import Any

if TYPE_CHECKING:
    import typer as _typer


#: where :func:`realize` keeps a function's recorded defaults
_SAVED = "__rota_lazy_defaults__"


class Param:
    """``typer.Option(default, *param_decls, **kw)`` or ``typer.Argument(default, **kw)``
    as written, waiting to become Typer's. (A plain class: dataclasses imports inspect.)"""

    __slots__ = ("decls", "default", "kind", "kw")

    def __init__(self, kind: str, default: Any, decls: tuple[str, ...],
                 kw: dict[str, Any]) -> None:
        self.kind = kind  # "option" or "argument"
        self.default, self.decls, self.kw = default, decls, kw

    def __repr__(self) -> str:
        return f"Param({self.kind!r}, {self.default!r}, {self.decls!r}, {self.kw!r})"

    def real(self) -> Any:
        import typer

        if self.kind == "option":
            return typer.Option(self.default, *self.decls, **self.kw)
        return typer.Argument(self.default, **self.kw)


def Option(default: Any = ..., *param_decls: str, **kw: Any) -> Any:
    return Param("option", default, param_decls, kw)


def Argument(default: Any = ..., **kw: Any) -> Any:
    return Param("argument", default, (), kw)


class Exit(SystemExit):
    """``raise typer.Exit(code)``: end the command with this exit status.

    A SystemExit, so it ends the process the same way under Typer, the fast lane and
    Typer's test runner (which records ``exit_code``).
    """

    def __init__(self, code: int = 0) -> None:
        super().__init__(code)
        self.exit_code = code


def realize(func: Callable[..., Any]) -> None:
    """Put Typer's Option/Argument in place of the recorded ones in ``func``'s defaults."""
    f: Any = getattr(func, "__func__", func)
    if not hasattr(f, "__code__"):
        return  # Typer's placeholder for "no callback"
    if not hasattr(f, _SAVED):  # the fast lane still reads the records
        setattr(f, _SAVED, (f.__defaults__, f.__kwdefaults__))
    if f.__defaults__:
        f.__defaults__ = tuple(_real(d) for d in f.__defaults__)
    if f.__kwdefaults__:
        f.__kwdefaults__ = {k: _real(v) for k, v in f.__kwdefaults__.items()}


def realize_app(app: _typer.Typer) -> None:
    """:func:`realize` every command and callback of a Typer app and of its sub-apps."""
    for cmd in app.registered_commands:
        if cmd.callback is not None:
            realize(cmd.callback)
    if app.registered_callback is not None and app.registered_callback.callback is not None:
        realize(app.registered_callback.callback)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            realize_app(group.typer_instance)
        if group.callback is not None:
            realize(group.callback)


def params_of(func: Callable[..., Any]) -> list[tuple[str, Param]]:
    """(name, record) of each recorded parameter of ``func``, in order (read from its code
    object: inspect costs ~10 ms to import)."""
    f: Any = getattr(func, "__func__", func)
    code = f.__code__
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    positional, keyword = getattr(f, _SAVED, (f.__defaults__, f.__kwdefaults__))
    positional = positional or ()
    defaults = dict(zip(names[code.co_argcount - len(positional):code.co_argcount],
                        positional, strict=True))
    defaults.update(keyword or {})
    return [(n, defaults[n]) for n in names if isinstance(defaults.get(n), Param)]


def _real(value: Any) -> Any:
    return value.real() if isinstance(value, Param) else value


def __getattr__(name: str) -> Any:
    # anything else is Typer's own (imported now, once); the import system's probes of
    # dunder names (__path__, ...) must not import it
    if name.startswith("__"):
        raise AttributeError(name)
    import typer

    value = getattr(typer, name)
    setattr(sys.modules[__name__], name, value)
    return value
