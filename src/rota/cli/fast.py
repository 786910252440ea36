"""The fast lane: `rota submit`, `queue`, `show` and `why` without Typer.

People run these hundreds of times a day, and through Typer each took 450-650 ms (Typer
and, since 0.2x, a pydantic adapter per option). Here the command's own function runs
with the arguments read from its declared options (the ``typer.Option``/``Argument``
records of :mod:`rota.cli.lazy_typer`), so there is one definition of every option.

Only plain argv is taken: long options (``--x v``, ``--x=v``), the short ones a command
declares, flags, ``--``, and str/int/float/bool/Path values (lists of them for repeatable
options). Anything else, --help, a value Typer would reject, an unknown option, a command
module that still imports Typer itself, goes to Typer, which parses it the usual way and
explains errors. tests/cli/test_fast_lane.py checks that both read argv the same way.
"""

from __future__ import annotations

import re
from importlib import import_module

from rota.cli.lazy_typer import Param, params_of

TYPE_CHECKING = False  # typing's, without importing typing (rota.cli starts faster)
if TYPE_CHECKING:
    from typing import Any

#: command -> (module, function, options may follow positional arguments). A command here
#: must be registered by that function under that name (checked in the tests).
HOT: dict[str, tuple[str, str, bool]] = {
    "submit": ("rota.cli.submit", "submit", False),
    "queue": ("rota.cli.queue_view", "queue", True),
    "show": ("rota.cli.job_view", "show", True),
    "why": ("rota.cli.job_view", "why", True),
}

_INT = re.compile(r"-?[0-9]+")
_FLOAT = re.compile(r"-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?")
_SCALARS = {"str", "int", "float", "bool", "Path"}
#: option settings that change only help, not how argv is read
_HELP_ONLY = {"help", "metavar", "show_default", "rich_help_panel", "hidden", "min", "max"}


class _Decline(Exception):
    """Leave this argv to Typer."""


def run(argv: list[str]) -> bool:
    """Run ``argv`` (without the program name) here if it is a hot command given plainly;
    False when Typer should run it instead. The command may end the process (SystemExit)."""
    if not argv or argv[0] not in HOT:
        return False
    module, name, interspersed = HOT[argv[0]]
    func = getattr(import_module(module), name)
    try:
        kwargs = parse(func, argv[1:], interspersed=interspersed)
    except _Decline:
        return False
    func(**kwargs)
    return True


class _Opt:
    __slots__ = ("flag_value", "name", "spec", "type")

    def __init__(self, name: str, spec: Param, type_: str, flag_value: bool | None) -> None:
        self.name, self.spec, self.type, self.flag_value = name, spec, type_, flag_value


def parse(func: Any, args: list[str], *, interspersed: bool) -> dict[str, Any]:
    """The keyword arguments Typer would call ``func`` with for ``args``; raises _Decline
    for anything this lane does not read exactly as Typer does."""
    params = params_of(func)
    if not params:
        raise _Decline  # the module declares its options with Typer itself
    options, arguments = _declared(func, params)
    values, positional = _read_options(args, options, interspersed=interspersed)
    for name, spec, type_ in arguments:
        if type_.startswith("list["):
            taken, positional = positional, []
            values[name] = [_convert(v, type_, spec) for v in taken] or None
        elif positional:
            values[name] = _convert(positional.pop(0), type_, spec)
    if positional:
        raise _Decline  # Typer says "Got unexpected extra argument"
    for name, spec in params:
        if name not in values:
            if spec.default is ...:
                raise _Decline  # Typer says which one is missing
            values[name] = spec.default
    return values


def _declared(func: Any, params: list[tuple[str, Param]],
              ) -> tuple[dict[str, _Opt], list[tuple[str, Param, str]]]:
    """The options by every string that names one, and the positional arguments."""
    annotations = func.__annotations__
    options: dict[str, _Opt] = {}
    arguments: list[tuple[str, Param, str]] = []
    for name, spec in params:
        type_ = _type_of(annotations.get(name))
        if set(spec.kw) - _HELP_ONLY:
            raise _Decline
        if spec.kind == "argument":
            arguments.append((name, spec, type_))
            continue
        for decl, flag_value in _decls(name, spec, type_):
            options[decl] = _Opt(name, spec, type_, flag_value)
    return options, arguments


def _read_options(args: list[str], options: dict[str, _Opt], *, interspersed: bool,
                  ) -> tuple[dict[str, Any], list[str]]:
    """The options' values, and the positional words (all of them after ``--``, and after
    the first one unless options may follow it)."""
    values: dict[str, Any] = {}
    positional: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            positional += args[i:]
            break
        if not (arg.startswith("-") and len(arg) > 1):
            positional.append(arg)
            if not interspersed:
                positional += args[i:]
                break
            continue
        key, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        opt = options.get(key)
        if opt is None:
            raise _Decline
        if opt.flag_value is not None:
            if eq:
                raise _Decline
            values[opt.name] = opt.flag_value
            continue
        if not eq:
            if i >= len(args):
                raise _Decline
            inline, i = args[i], i + 1
        value = _convert(inline, opt.type, opt.spec)
        if opt.type.startswith("list["):
            values.setdefault(opt.name, []).append(value)
        else:
            values[opt.name] = value
    return values, positional


def _type_of(annotation: Any) -> str:
    text = str(annotation).replace(" | None", "").replace("typing.", "")
    inner = text[5:-1] if text.startswith("list[") and text.endswith("]") else text
    if inner not in _SCALARS or (inner != text and inner == "bool"):
        raise _Decline
    return text


def _decls(name: str, spec: Param, type_: str) -> list[tuple[str, bool | None]]:
    """(option string, the value it sets when it is a flag, else None)."""
    decls = [d for d in spec.decls if d.startswith("-")] or [f"--{name.replace('_', '-')}"]
    if type_ != "bool":
        return [(d, None) for d in decls]
    if not spec.decls:  # Typer adds --no-X to a bool option it names itself
        return [(decls[0], True), (f"--no-{name.replace('_', '-')}", False)]
    out: list[tuple[str, bool | None]] = []
    for d in decls:
        on, _, off = d.partition("/")
        out.append((on.strip(), True))
        if off:
            out.append((off.strip(), False))
    return out


def _convert(text: str, type_: str, spec: Param) -> Any:
    base = type_[5:-1] if type_.startswith("list[") else type_
    value: Any
    if base == "str":
        return text
    if base == "Path":
        from pathlib import Path

        return Path(text)
    if base == "int" and _INT.fullmatch(text):
        value = int(text)
    elif base == "float" and _FLOAT.fullmatch(text):
        value = float(text)
    else:
        raise _Decline
    low, high = spec.kw.get("min"), spec.kw.get("max")
    if (low is not None and value < low) or (high is not None and value > high):
        raise _Decline  # Typer words the range error
    return value
