"""Help without Python types.

Typer labels every option with its annotation (`<bool>`, `<list[int]>`, `<str>`). People
read `--gpu-mem MEM` or `--retries INTEGER`, and a flag needs no label at all: this swaps
Typer's label for the option's metavar, or a click-style word for its type.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args, get_origin

_WORDS: dict[Any, str] = {str: "TEXT", int: "INTEGER", float: "NUMBER", Path: "PATH"}
_done = False


def _label(param: Any, ctx: Any) -> str | None:
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return None
    if getattr(param, "param_type_name", "") == "argument":
        return None  # its name (JOB, JOB...) already says what it is
    if param.metavar is not None:
        return str(param.metavar)
    desc = param.type_descriptor
    annotation = desc.annotation
    if get_origin(annotation) is list:
        annotation = get_args(annotation)[0]
    if desc.is_choice:
        return "|".join(str(c) for c in desc.choices or ())
    word = _WORDS.get(annotation, "VALUE")
    return word + ("..." if param.nargs != 1 else "")


def plain_help_types() -> None:
    """Install the labels (once; cheap: it only replaces two methods)."""
    global _done
    if _done:
        return
    from typer import core

    core.TyperOption.display_type_rich = _label  # type: ignore[method-assign,assignment]
    core.TyperArgument.display_type_rich = _label  # type: ignore[method-assign,assignment]
    _done = True
