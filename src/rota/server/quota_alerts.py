"""Quota alerts: an owner crossed 50, 80 or 100 % of a quota.

For now an alert is an event (kind ``quota_alert``); the webhook outbox is to be connected
here. Once-only is the caller's: Store.quota_alert_sent marks (quota, period, threshold) in
the store before ``alert`` is called, so a restarted daemon does not send it again.
"""

from __future__ import annotations

from rota.store.repo import Store


def alert(store: Store, kind: str, owner: str, percent: int, message: str, *,
          now: float) -> None:
    """Record one alert: ``kind`` user|project, ``owner`` its name, the threshold crossed."""
    store.add_event(job_id=None, kind="quota_alert", now=now,
                    message=f"{kind} {owner} reached {percent} % of a quota: {message}")
