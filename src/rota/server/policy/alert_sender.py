"""Alerts out to a webhook: a durable outbox (the store's ``alerts``) and a task that
empties it.

A producer calls ``alert(key, text, ...)``; the alert is stored pending, keyed by the
producer's once-only key (a second alert with the same key is dropped), and the task wakes.
The task POSTs each due alert (httpx, short timeouts; the loop never waits on a receiver,
only the task does) and records the outcome as soon as the answer is in, in the same turn
of the loop: 2xx sent; no answer, 429 or 5xx tried again after a jittered, doubling backoff
(or the receiver's Retry-After); another answer, or too many tries, failed.

Once only: a key is stored once, and an alert is marked sent right after its 2xx. A daemon
killed between the receiver's 2xx and that write (a few milliseconds) sends the alert once
more after its restart; Slack-style receivers cannot de-duplicate, so this window is kept to
the one write. Pending alerts survive restarts (they are rows, not memory).

The URL is a stored secret (``[alerts] webhook_secret``), read at each round so a changed
secret takes effect at once; it is never logged, stored with an alert or put in an answer:
a Slack-style URL is itself the credential, so errors name its host only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx

from rota.config import AlertSettings
from rota.core.alerts import after_try, backoff, payload, retry_after
from rota.server.access.secrets import Secrets
from rota.server.jobs.batch import Batch
from rota.store.repo import AlertRecord, Store

log = logging.getLogger("rota.alerts")
#: the longest the task sleeps with nothing due (an alert added wakes it at once)
IDLE_S = 30.0
#: alerts POSTed in one round (at once)
ROUND = 50
#: the wait before looking again for a webhook secret that is not stored
NO_URL_WAIT_S = 60.0


def redact(url: str) -> str:
    """The part of a webhook's URL that may be shown: scheme and host (Slack's secret is
    its path)."""
    try:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.hostname or '?'}/…"
    except ValueError:
        return "(a URL that cannot be read)"


def _scrubbed(text: str, url: str) -> str:
    """``text`` without the URL, or its path and query (the secret part), anywhere in it."""
    text = text.replace(url, redact(url))
    try:
        parts = urlsplit(url)
        secret = parts.path + (f"?{parts.query}" if parts.query else "")
    except ValueError:
        return text
    return text.replace(secret, "/…") if len(secret) > 1 else text


def webhook_url(settings: AlertSettings, secrets: Secrets, owner: str) -> str | None:
    """The URL from the stored secret named by ``[alerts] webhook_secret`` (None: no
    webhook set, or the secret is not stored)."""
    name = settings.webhook_secret
    if name is None:
        return None
    return secrets.values(settings.webhook_user or owner, [name]).get(name)


class AlertSender:
    def __init__(self, settings: AlertSettings, store: Store, *, url: Callable[[], str | None],
                 clock: Callable[[], float], batch: Batch, rng: random.Random,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.settings, self.store, self.clock, self.rng = settings, store, clock, rng
        self.url, self._batch, self._transport = url, batch, transport
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None
        self._warned_no_url = False

    # --- producers -----------------------------------------------------------------------
    def alert(self, key: str, text: str, *, kind: str = "alert", user: str | None = None,
              **fields: Any) -> bool:
        """Store an alert to be sent once; False when ``key`` was alerted already. Joins
        the caller's batch when there is one; the task wakes once it is committed."""
        if not key or len(key) > 200:
            raise ValueError(f"an alert's key must be 1 to 200 characters, got {len(key)}")
        body = payload(text, kind=kind, key=key, **({"user": user} if user else {}), **fields)
        added = self.store.add_alert(key, body, now=self.clock(), user=user)
        if added:
            self.store.after_commit(self.kick)
        return added

    def kick(self) -> None:
        self._wake.set()

    # --- the task ------------------------------------------------------------------------
    def start(self) -> None:
        # httpx logs every request's URL at INFO: the URL is the credential
        logging.getLogger("httpx").setLevel(max(logging.WARNING,
                                                logging.getLogger("httpx").level))
        self._task = asyncio.create_task(self._run(), name="alerts")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            wait = IDLE_S
            try:
                wait = await self.send_due()
            except Exception:  # the task must outlive one bad round; the error is logged
                log.exception("sending alerts failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.0, wait))

    async def send_due(self) -> float:
        """POST every due alert (up to ROUND at once); seconds until the next is due."""
        now = self.clock()
        due = self.store.due_alerts(now, limit=ROUND)
        if due:
            url = self.url()
            if url is None:
                if not self._warned_no_url:
                    name = self.settings.webhook_secret
                    why = (f"its secret {name!r} is not stored (rota secret set {name})"
                           if name else "none is set ([alerts] webhook_secret in rota.toml)")
                    log.warning("%d alert(s) wait for a webhook: %s", len(due), why)
                    self._warned_no_url = True
                return NO_URL_WAIT_S
            self._warned_no_url = False
            await asyncio.gather(*(self._send(row, url) for row in due))
            if len(due) == ROUND:
                return 0.0
        soonest = self.store.next_alert_at()
        return IDLE_S if soonest is None else min(IDLE_S, soonest - self.clock())

    async def _send(self, row: AlertRecord, url: str) -> None:
        status: int | None = None
        error: str | None = None
        header: str | None = None
        try:
            resp = await self._http().post(url, json=row.payload)
            status, header = resp.status_code, resp.headers.get("retry-after")
            if status >= 300:
                error = _scrubbed(resp.text[:300], url)
        except httpx.HTTPError as e:  # no answer: tried again
            error = _scrubbed(f"{type(e).__name__}: {e}", url)
        except Exception as e:  # a URL httpx cannot use (InvalidURL...): its words may quote
            error = f"{type(e).__name__} (the webhook's URL may be wrong)"  # it: left out
        # recorded at once, with no wait in between: a restart resends only an alert whose
        # 2xx came in the instant before the daemon died
        self._record(row, status, error, header)

    def _record(self, row: AlertRecord, status: int | None, error: str | None,
                header: str | None) -> None:
        now, tries, s = self.clock(), row.attempts + 1, self.settings
        step = after_try(status, error, tries=tries, max_tries=s.max_tries, now=now,
                         wait=backoff(tries, first=s.first_backoff, cap=s.max_backoff,
                                      rng=self.rng),
                         retry_after_s=retry_after(header, now))
        with self._batch():
            self.store.update_alert(row.id, state=step.state, attempts=tries,
                                    last_error=step.error,
                                    sent_at=now if step.state == "sent" else None,
                                    next_try_at=step.next_try_at or row.next_try_at)
        if step.state == "failed":
            log.warning("alert %s failed: %s", row.key, step.error)
        elif step.state == "pending":
            log.info("alert %s not sent (%s); next try in %.1f s", row.key, step.error,
                     (step.next_try_at or now) - now)

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.settings.timeout,
                                             follow_redirects=False,
                                             transport=self._transport)
        return self._client
