"""Each route's success answer in the OpenAPI document, from its TypedDict in rota.answers
(the one definition, which the CLI's client reads too), at no cost per request.

A route names its answer in its return annotation, as metadata:
``-> Annotated[Json, HealthAnswer]`` (Json is ``dict[str, Any]``). FastAPI serialises the
dict as the plain ``dict[str, Any]`` it is, as before (pydantic ignores metadata it does
not know): no answer is validated or copied against its type, so the bytes and the cost
stay the same.
A route that builds its own Response (with ``response_model=None``) names it the same
way: ``-> Annotated[Response, LogAnswer]``. :func:`document_answers` then puts each
TypedDict's JSON schema in the document: every key, whether it is required, its JSON type,
nested objects, enums, and no key beyond those (what tests/sdk/test_answer_types.py and
schemathesis hold the daemon's real answers to)."""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable
from typing import Any

import typing_extensions as te
from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import ConfigDict, TypeAdapter
from pydantic.json_schema import JsonSchemaMode

__all__ = ["answer_of", "document_answers", "pydantic_type"]

REF = "#/components/schemas/{model}"
_PYDANTIC: dict[Any, Any] = {}
_typed_dict: Any = te.TypedDict  # called with a name made at run time


def pydantic_type(tp: Any) -> Any:
    """A type of rota.answers as pydantic reads it: each TypedDict rebuilt with
    typing_extensions' TypedDict (pydantic needs it on Python 3.11; rota.answers imports
    only typing), keeping its name and docstring, and refusing keys it does not declare."""
    if typing.is_typeddict(tp):
        if tp not in _PYDANTIC:
            hints = typing.get_type_hints(tp)
            fields = {k: pydantic_type(v) if k in tp.__required_keys__
                      else te.NotRequired[pydantic_type(v)] for k, v in hints.items()}
            made = _typed_dict(tp.__name__, fields)
            made.__doc__ = tp.__doc__
            made.__pydantic_config__ = ConfigDict(extra="forbid")  # as pydantic.with_config
            _PYDANTIC[tp] = made
        return _PYDANTIC[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        return typing.Union[tuple(pydantic_type(a) for a in args)]  # noqa: UP007
    if origin in (list, tuple, dict):
        return origin[tuple(pydantic_type(a) for a in args)]
    return tp


def answer_of(route: APIRoute) -> Any | None:
    """The TypedDict a route's return annotation names as its answer (None: none)."""
    hint: Any = typing.get_type_hints(route.endpoint, include_extras=True).get("return")
    if typing.get_origin(hint) is not typing.Annotated:
        return None
    return next((m for m in hint.__metadata__ if typing.is_typeddict(m)), None)


#: a route's success answer: (method, path, status) -> its TypedDict
Answers = dict[tuple[str, str, str], Any]


def _answers(routes: Iterable[Any]) -> Answers:
    out: Answers = {}
    for r in routes:
        if isinstance(r, APIRoute) and r.include_in_schema:
            for method in r.methods or ():
                tp = answer_of(r)
                if tp is not None:
                    out[(method.lower(), r.path_format, str(r.status_code or 200))] = tp
    return out


def _schemas(answers: Iterable[Any]) -> tuple[dict[Any, dict[str, Any]], dict[str, Any]]:
    """Each type's schema (a $ref) and the definitions they refer to, made in one go so
    that a TypedDict two answers share is defined once."""
    mode: JsonSchemaMode = "serialization"
    inputs = [(tp, mode, TypeAdapter(pydantic_type(tp))) for tp in set(answers)]
    refs, defs = TypeAdapter.json_schemas(inputs, ref_template=REF)
    return {tp: schema for (tp, _), schema in refs.items()}, defs.get("$defs", {})


def _put_answers(doc: dict[str, Any], answers: Answers) -> None:
    refs, defs = _schemas(answers.values())
    components = doc.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in defs.items():
        if components.setdefault(name, schema) != schema:  # a request model of that name
            raise ValueError(f"two schemas named {name} in the OpenAPI document")
    for (method, path, status), tp in answers.items():
        answer = doc["paths"][path][method]["responses"][status]
        answer.setdefault("content", {}).setdefault("application/json", {})[
            "schema"] = refs[tp]


def document_answers(app: FastAPI, routes: Iterable[Any]) -> None:
    """The app's OpenAPI document gives the success answer of each of these routes as its
    TypedDict's schema (see the module's docstring); built once, with the document."""
    answers = _answers(routes)
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = build()
            _put_answers(doc, answers)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
