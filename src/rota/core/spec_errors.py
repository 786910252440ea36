"""A job spec's errors as people read them: pydantic's errors turned into one
:class:`~rota.errors.InvalidSpec` naming the field (``metric_patterns[2]``,
``env.HF_HOME``), and a units parser's ``InvalidSpec`` turned into the ``ValueError`` that
pydantic reports at its field.

``rota.core.spec.parse_spec`` and the spec's validators use them; the API's problem
answers (``rota.server.api.problems``) word a request body's errors the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from rota.errors import InvalidSpec


def _as_value_error(parse: Callable[[Any], Any], v: Any) -> Any:
    """A units parser's InvalidSpec as the ValueError pydantic reports at its field (where
    the spec is a request body, pydantic lets other exceptions through)."""
    try:
        return parse(v)
    except InvalidSpec as e:
        raise ValueError(str(e)) from None


def spec_error(e: ValidationError, *, where: str = "") -> InvalidSpec:
    parts = []
    first_field: str | None = None
    for err in e.errors():
        loc = field_path(err["loc"])
        first_field = first_field or loc
        parts.append(f"{loc}: {error_text(loc, err['msg'])}")
    prefix = f"{where}: " if where else ""
    return InvalidSpec(prefix + "; ".join(parts), field=first_field)


def field_path(loc: tuple[int | str, ...]) -> str:
    """pydantic's location as a field path: ``metric_patterns[2]``, ``env.HF_HOME``."""
    out = ""
    for x in loc:
        out += f"[{x}]" if isinstance(x, int) else (f".{x}" if out else str(x))
    return out or "spec"


def error_text(loc: str, msg: str) -> str:
    """Pydantic's message for a field, without its prefix or a repeat of the field's name
    (the units parsers name it too)."""
    return msg.removeprefix("Value error, ").removeprefix(f"{loc}: ")
