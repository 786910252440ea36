"""Alerts as the webhook gets them, and what to do after each POST.

Pure: the sender (rota.server.policy.alert_sender) does the I/O and hands in the answer, ``now``
and a seeded ``rng``; these functions decide whether the alert is sent, tried again (and
when) or given up.
"""

from __future__ import annotations

import random
from email.utils import parsedate_to_datetime
from typing import Any, Literal, NamedTuple

#: the longest wait a receiver's Retry-After is followed for (a larger one is cut to it)
MAX_RETRY_AFTER_S = 86_400.0
#: most of a webhook's answer kept as an alert's last error
ERROR_CHARS = 300


def payload(text: str, *, kind: str, key: str, **fields: Any) -> dict[str, Any]:
    """A Slack-compatible body: ``text`` is what Slack (and Mattermost, Discord's /slack
    endpoint, Teams' workflows) shows; ``rota`` carries the same facts for machines."""
    if not text.strip():
        raise ValueError("an alert needs a text")
    return {"text": text, "rota": {"kind": kind, "key": key, **fields}}


class Step(NamedTuple):
    """After a try: the alert's new state, when it is tried next and why it was not
    sent (None: sent)."""

    state: Literal["sent", "pending", "failed"]
    next_try_at: float | None
    error: str | None


def backoff(tries: int, *, first: float, cap: float, rng: random.Random) -> float:
    """Seconds before the next try after ``tries`` failed ones: doubling from ``first`` up
    to ``cap``, the upper half jittered so that many alerts do not retry in step."""
    base = min(cap, first * 2.0 ** max(0, tries - 1))
    return base / 2 + rng.uniform(0, base / 2)


def retry_after(value: str | None, now: float) -> float | None:
    """A Retry-After header's seconds (delta or HTTP date); None when absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    try:
        seconds = float(text) if text.isdigit() else parsedate_to_datetime(text).timestamp() - now
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return min(max(0.0, seconds), MAX_RETRY_AFTER_S)


def after_try(status: int | None, error: str | None, *, tries: int, max_tries: int,
              now: float, wait: float, retry_after_s: float | None = None) -> Step:
    """What a POST's outcome means. ``status`` None: no answer (``error`` says why);
    ``tries`` counts this one; ``wait`` is the backoff (see ``backoff``).

    2xx: sent. 429, 5xx and no answer: tried again, after Retry-After when the receiver
    gave one; given up after ``max_tries``. Any other answer (a 4xx: a revoked or wrong
    URL, a body it refuses) is not going to change: failed at once."""
    if status is not None and 200 <= status < 300:
        return Step("sent", None, None)
    why = f"HTTP {status}" if status is not None else "no answer"
    if error:
        why = f"{why}: {error[:ERROR_CHARS]}"
    retryable = status is None or status == 429 or status >= 500
    if not retryable:
        return Step("failed", None, why)
    if tries >= max_tries:
        return Step("failed", None, f"{why} (gave up after {tries} tries)")
    delay = wait if retry_after_s is None else max(retry_after_s, 0.0)
    return Step("pending", now + delay, why)
