"""The HTTP API (/v1): one router per resource over the two ports (rota.server.ports), so
nothing here reads the daemon. Served on the daemon's Unix socket (and TCP); handlers are
coroutines so they run on the loop thread, where the daemon is the single writer. Beside
the routers: how jobs look in answers (``views``) and the reads behind them
(``job_reads``, ``report_reads``, ``eval_reads``, ``pool_reads``), error answers
(``problems``), request size limits and admission. May import ``ports``, ``tracking``
(metrics) and ``access``; never the loop or the daemon's ports."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI

from rota import __version__
from rota.config import DEFAULT_MAX_REQUEST_BYTES
from rota.server.access.auth import VIA_KEY
from rota.server.api import (
    access,
    alerts,
    artifacts,
    datasets,
    eval,
    gpus,
    job_outputs,
    job_reads,
    jobs,
    pipelines,
    pools,
    quotas,
    secrets,
    share_links,
    shares,
    system,
    usage,
    workspaces,
)
from rota.server.api._shared import caller
from rota.server.api.admission import PointRequestsFirst
from rota.server.api.answer_schemas import document_answers
from rota.server.api.body_limit import BodyLimit
from rota.server.api.problems import answer_errors_as_problems, document_problems, methods_by_path
from rota.server.ports import Commands, Reads
from rota.server.tracking.metrics import RequestTimer
from rota.server.web import mount_dashboard

#: every /v1 route (the prefix is in each router's route templates: metrics labels)
ROUTERS = (job_reads.router, jobs.router, job_outputs.router, gpus.router, access.router,
           secrets.router, system.router, pools.router, eval.router, shares.router,
           usage.router, quotas.router, alerts.router, pipelines.router, artifacts.router,
           share_links.router, workspaces.router,
           datasets.router)


def build_app(commands: Commands, reads: Reads, *,
              max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> FastAPI:
    """``max_request_bytes``: the largest request body taken (the setting of that name)."""
    app = FastAPI(title="Rota", version=__version__, docs_url=None, redoc_url=None)
    app.state.commands, app.state.reads = commands, reads  # the routers' ports (_shared)
    app.add_middleware(BodyLimit, limit=max_request_bytes)
    app.add_middleware(PointRequestsFirst)  # inside the timer: its wait is timed
    app.add_middleware(RequestTimer, histogram=reads.requests)
    document_problems(app)
    app.include_router(system.metrics_router)
    app.include_router(share_links.public_router)  # no caller: the link is the credential
    routes = [r for part in ROUTERS for r in part.routes]
    document_answers(app, routes)
    for part in ROUTERS:
        app.include_router(part, dependencies=[Depends(caller)])  # every /v1 call: a caller
    answer_errors_as_problems(app, methods_by_path(routes))
    mount_dashboard(app)
    return app


def tcp_app(app: Any) -> Any:
    """The same app for the TCP listener: its requests are marked so they need a token."""
    async def marked(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            scope = {**scope, VIA_KEY: "tcp"}
        await app(scope, receive, send)
    return marked
