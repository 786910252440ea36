"""Error answers: problem+json (RFC 9457) naming the field at fault, never a traceback;
and their place in the OpenAPI document, so that it lists every error a route gives."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException

from rota.core.spec_errors import error_text
from rota.errors import RotaError, StoreError
from rota.store.failures import store_error

PROBLEM = "application/problem+json"

#: what each error status means in this API (the descriptions in the OpenAPI document)
MEANING = {
    400: "the body is not JSON",
    401: "no token, or an unknown or revoked one (over TCP)",
    403: "the caller may not do this (not an admin, or not the job's owner)",
    404: "no such job, GPU, user, token or secret",
    409: "the request conflicts with the state of what it names",
    410: "the link expired or was revoked",
    422: "a parameter or the body is invalid (the field is named)",
    502: "a store or remote service Rota relies on refused or failed (the detail says which)",
    503: "the store or the daemon is unavailable; nothing was changed",
    504: "the daemon did not answer in time",
}


class Problem(BaseModel):
    """An error (RFC 9457): ``title`` is the kind of error, ``detail`` says what is wrong
    in a sentence, ``field`` names the input at fault when there is one."""

    type: str = "about:blank"
    title: str
    status: int = Field(ge=400, le=599)
    detail: str
    field: str | None = None


def problem(status: int, title: str, detail: str, field: str | None = None,
            headers: dict[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status,
                            "detail": detail}
    if field:
        body["field"] = field
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


def methods_by_path(routes: Iterable[Any]) -> Callable[[str], list[str]]:
    """Every method some route answers at a path: a 405's ``Allow`` (Starlette's names
    only the methods of the first route that matched the path)."""
    table = [(r.path_regex, r.methods or set()) for r in routes if isinstance(r, APIRoute)]

    def allowed(path: str) -> list[str]:
        return sorted({m for regex, methods in table if regex.match(path) for m in methods})
    return allowed


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route that may answer these error statuses."""
    return {s: {"model": Problem, "description": MEANING[s]} for s in statuses}


def _where(loc: tuple[Any, ...]) -> tuple[str, str]:
    """(text, field) of a validation error's location: a submitted job's item as
    ``jobs[i]: field``, the pattern clients map to their input's lines."""
    parts = [str(x) for x in loc if x not in ("body", "query", "path", "header")]
    if len(loc) > 2 and loc[:2] == ("body", "jobs") and isinstance(loc[2], int):
        inner = ".".join(str(x) for x in loc[3:]) or "spec"
        return f"jobs[{loc[2]}]: {inner}", inner
    field = ".".join(parts)
    return field, field


def answer_errors_as_problems(app: FastAPI,
                              allowed: Callable[[str], list[str]] | None = None) -> None:
    """Errors as problem+json naming the field at fault; never a traceback. ``allowed``
    gives a 405's Allow header (see methods_by_path)."""

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, e: HTTPException) -> JSONResponse:
        headers = dict(e.headers or {})
        if e.status_code == 405 and allowed is not None:
            headers["Allow"] = ", ".join(allowed(request.url.path))
        detail = e.detail if isinstance(e.detail, str) else HTTPStatus(e.status_code).phrase
        return problem(e.status_code, HTTPStatus(e.status_code).phrase.replace(" ", ""),
                       detail, headers=headers)

    @app.exception_handler(RotaError)
    async def _rota_error(_: Request, e: RotaError) -> JSONResponse:
        return problem(e.http_status, type(e).__name__, str(e), getattr(e, "field", None))

    @app.exception_handler(SQLAlchemyError)
    async def _store_error(_: Request, e: SQLAlchemyError) -> JSONResponse:
        # a read that met the database's failure outside the store's own translation
        err = store_error("could not read the database", e, None)
        return problem(StoreError.http_status, "StoreError", str(err))

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_: Request, e: RequestValidationError) -> JSONResponse:
        err = e.errors()[0]
        where, field = _where(tuple(err["loc"]))
        msg = error_text(field, str(err["msg"]))
        return problem(422, "InvalidRequest", f"{where}: {msg}", field)


def document_problems(app: FastAPI) -> None:
    """The OpenAPI document gives error answers as application/problem+json (FastAPI would
    call them application/json)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
            for item in doc.get("paths", {}).values():
                for op in item.values():
                    for status, answer in op.get("responses", {}).items():
                        content = answer.get("content", {})
                        if status[0] in "45" and "application/json" in content:
                            content[PROBLEM] = content.pop("application/json")
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
