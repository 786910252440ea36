"""The JSON shape of a TypedDict of rota.answers and of a JSON schema (the daemon's
OpenAPI document), in one form, so they can be compared key by key; and a pydantic view
of a TypedDict that refuses keys it does not declare (for validating real answers).

A shape is ``(kind, payload)``: ("object", {key: (required, shape)}), ("array", item),
("tuple", items), ("map", value), ("enum", values), ("union", alternatives), a scalar
("integer", None) ..., and from a schema ("any", None) or ("object", None) where the
document does not say (those match whatever the type says).
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import TypeAdapter

from rota.server.api.answer_schemas import pydantic_type

Shape = tuple[str, Any]
_SCALARS: dict[Any, str] = {int: "integer", float: "number", str: "string", bool: "boolean",
                            type(None): "null"}


def of_type(tp: Any) -> Shape:
    """The JSON shape of a type of rota.answers."""
    if typing.is_typeddict(tp):
        hints = typing.get_type_hints(tp)
        return ("object", {k: (k in tp.__required_keys__, of_type(v)) for k, v in hints.items()})
    if tp in _SCALARS:
        return (_SCALARS[tp], None)
    if tp is object:  # any JSON value (a pool's own settings)
        return ("any", None)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        return ("union", [of_type(a) for a in args])
    if origin is typing.Literal:
        return ("enum", frozenset(args))
    if origin is list:
        return ("array", of_type(args[0]))
    if origin is tuple:
        return ("tuple", tuple(of_type(a) for a in args))
    if origin is dict and args[0] is str:
        return ("map", of_type(args[1]))
    raise TypeError(f"no JSON shape for {tp!r}")


def of_schema(schema: dict[str, Any], doc: dict[str, Any]) -> Shape:
    """The JSON shape a JSON schema describes (``$ref`` read in ``doc``)."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return of_schema(doc["components"]["schemas"][name], doc)
    if "anyOf" in schema:
        return ("union", [of_schema(s, doc) for s in schema["anyOf"]])
    if "enum" in schema:
        return ("enum", frozenset(schema["enum"]))
    kind = schema.get("type")
    if kind == "object":
        if "properties" in schema:
            required = set(schema.get("required", []))
            return ("object", {k: (k in required, of_schema(s, doc))
                               for k, s in schema["properties"].items()})
        extra = schema.get("additionalProperties", True)
        return ("object", None) if extra is True else ("map", of_schema(extra, doc))
    if kind == "array":
        if "prefixItems" in schema and schema.get("items", False) is False:  # a tuple
            return ("tuple", tuple(of_schema(s, doc) for s in schema["prefixItems"]))
        return ("array", of_schema(schema.get("items", {}), doc))
    if kind is None:
        return ("any", None)
    return (kind, None)


def differences(mine: Shape, theirs: Shape, where: str = "") -> list[str]:
    """Where the type's shape (``mine``) and the schema's (``theirs``) part, one line a
    difference; nothing where the schema does not say."""
    if theirs[0] == "any" or (theirs == ("object", None) and mine[0] in ("object", "map")):
        return []
    if mine[0] == "union" or theirs[0] == "union":
        return _union_differences(mine, theirs, where)
    if mine[0] != theirs[0]:
        return [f"{where or '.'}: {mine[0]} here, {theirs[0]} in the document"]
    kind, a, b = mine[0], mine[1], theirs[1]
    if kind in ("array", "map"):
        return differences(a, b, f"{where}[]")
    if kind == "tuple":
        if len(a) != len(b):
            return [f"{where}: {len(a)} items here, {len(b)} in the document"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, f"{where}[{i}]")]
    if kind == "object":
        return _object_differences(a, b, where)
    if a != b:
        return [f"{where}: {sorted(a)} here, {sorted(b)} in the document"]
    return []


def _alternatives(shape: Shape) -> dict[str, Shape]:
    alts = shape[1] if shape[0] == "union" else [shape]
    return {a[0]: a for a in alts}


def _union_differences(mine: Shape, theirs: Shape, where: str) -> list[str]:
    a, b = _alternatives(mine), _alternatives(theirs)
    if set(a) != set(b):
        return [f"{where}: {' | '.join(sorted(a))} here, {' | '.join(sorted(b))} in the "
                "document"]
    return [d for kind in a for d in differences(a[kind], b[kind], where)]


def _object_differences(a: dict[str, Any], b: dict[str, Any], where: str) -> list[str]:
    out = [f"{where}.{k}: not in the document" for k in sorted(set(a) - set(b))]
    out += [f"{where}.{k}: missing here" for k in sorted(set(b) - set(a))]
    for k in sorted(set(a) & set(b)):
        (need_a, sa), (need_b, sb) = a[k], b[k]
        if need_a != need_b:
            out.append(f"{where}.{k}: {'required' if need_a else 'NotRequired'} here, "
                       f"{'required' if need_b else 'optional'} in the document")
        out += differences(sa, sb, f"{where}.{k}")
    return out


# --- validating real answers ---------------------------------------------------------------
def strict_adapter(tp: Any) -> TypeAdapter[Any]:
    """A pydantic adapter for a type of rota.answers that also refuses keys the TypedDicts
    do not declare: the types the daemon's OpenAPI document is made from."""
    return TypeAdapter(pydantic_type(tp))
