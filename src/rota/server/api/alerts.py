"""Alerts sent to the webhook (rota.server.policy.alert_sender): listed with their state; an
admin may send a test one. No answer carries the webhook's URL (it is never stored with
an alert)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from rota.answers import AlertAnswer, AlertsAnswer
from rota.server.api._shared import Caller, CommandsPort, Json, ReadsPort
from rota.server.api.problems import errors
from rota.store.repo import AlertRecord


class TestAlertBody(BaseModel):
    text: str | None = Field(default=None, min_length=1, max_length=2000,
                             description="what the alert says (default: a test line)")


def alert_view(row: AlertRecord) -> dict[str, Any]:
    body: dict[str, Any] = row.payload if isinstance(row.payload, dict) else {}
    facts: dict[str, Any] = body["rota"] if isinstance(body.get("rota"), dict) else {}
    return {"id": row.id, "key": row.key, "user": row.user,
            "kind": str(facts.get("kind", "alert")), "text": str(body.get("text", "")),
            "state": row.state, "attempts": row.attempts, "created_at": row.created_at,
            "next_try_at": row.next_try_at if row.state == "pending" else None,
            "sent_at": row.sent_at, "last_error": row.last_error}


router = APIRouter(prefix="/v1")  # in the route templates (metrics labels)


@router.get("/alerts", responses=errors(401, 403, 422, 503))
async def alerts_list(
        p: Caller, reads: ReadsPort,
        user: str | None = Query(None, pattern=r"^[a-z_][a-z0-9_.-]{0,63}$",
                                 description="whose alerts (default: an admin's all, "
                                             "anyone else's their own)"),
        limit: int = Query(100, ge=1, le=1000)) -> Annotated[Json, AlertsAnswer]:
    """The newest first."""
    if user is not None and user != p.user:
        p.require_admin(f"listing the alerts of {user!r}")
    whose = user if user is not None or p.admin else p.user
    return {"alerts": [alert_view(r) for r in reads.store.alerts(user=whose, limit=limit)]}


@router.post("/alerts/test", status_code=201,
             responses=errors(400, 401, 403, 409, 422, 503))
async def alert_test(p: Caller, commands: CommandsPort,
                     body: TestAlertBody | None = None) -> Annotated[Json, AlertAnswer]:
    """Send a test alert to the webhook, like any other (admin: the webhook is the
    daemon's)."""
    p.require_admin("sending a test alert")
    return alert_view(commands.test_alert(p.user, body.text if body else None))
