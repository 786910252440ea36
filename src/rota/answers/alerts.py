"""The answers about alerts (rota.server.policy.alert_sender) (see rota.answers)."""

from typing import TypedDict


class AlertAnswer(TypedDict):
    """An alert as stored: never the webhook's URL."""

    id: int
    key: str  # the producer's once-only key
    user: str | None  # whom it concerns (None: everyone's admins)
    kind: str
    text: str
    state: str  # pending | sent | failed
    attempts: int
    created_at: float
    next_try_at: float | None  # None once sent or failed
    sent_at: float | None
    last_error: str | None


class AlertsAnswer(TypedDict):
    alerts: list[AlertAnswer]
