"""The alert sender against a real local HTTP receiver: each alert reaches it once, is
retried on 5xx and network errors, given up on other 4xx, and its URL is never logged."""

from __future__ import annotations

import asyncio
import logging
import random
import socket
from pathlib import Path

import pytest

from receiver import receiving
from rota.config import AlertSettings
from rota.server.policy.alert_sender import AlertSender
from rota.store.repo import Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(f"sqlite:///{tmp_path / 'rota.db'}")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def sender(store: Store, url: str | None, clock: Clock, **settings: object) -> AlertSender:
    return AlertSender(AlertSettings(webhook_secret="HOOK", **settings),  # type: ignore[arg-type]
                       store, url=lambda: url, clock=clock, batch=store.transaction,
                       rng=random.Random(0))


def one(store: Store) -> tuple[str, int, str | None]:
    (row,) = store.alerts()
    return row.state, row.attempts, row.last_error


def test_an_alert_reaches_the_receiver_once(store: Store) -> None:
    clock = Clock()
    with receiving() as rec:
        s = sender(store, rec.url, clock)
        assert s.alert("quota:7:80", "ann used 80 % of her quota", kind="quota", user="ann",
                       percent=80)
        assert not s.alert("quota:7:80", "again", kind="quota", user="ann")

        async def main() -> None:
            await s.send_due()
            await s.send_due()  # nothing left to send
            await s.stop()
        asyncio.run(main())
    assert rec.bodies == [{"text": "ann used 80 % of her quota",
                           "rota": {"kind": "quota", "key": "quota:7:80", "user": "ann",
                                    "percent": 80}}]
    assert one(store) == ("sent", 1, None)
    assert store.alerts()[0].sent_at == clock.t


def test_500_then_200_is_retried_after_the_backoff_and_delivered_once(store: Store) -> None:
    clock = Clock()
    with receiving([500]) as rec:
        s = sender(store, rec.url, clock, first_backoff=2.0)
        s.alert("k", "hello")

        async def main() -> None:
            await s.send_due()
            assert one(store) == ("pending", 1, "HTTP 500: ok")
            due = store.alerts()[0].next_try_at
            assert clock.t + 1 <= due <= clock.t + 2  # backoff, jittered
            await s.send_due()  # not due yet: not sent
            assert len(rec.bodies) == 1
            clock.t = due
            await s.send_due()
            await s.stop()
        asyncio.run(main())
    assert len(rec.bodies) == 2 and rec.bodies[0] == rec.bodies[1]
    assert one(store) == ("sent", 2, None)


def test_429_waits_for_retry_after(store: Store) -> None:
    clock = Clock()
    with receiving([429], headers={"Retry-After": "30"}) as rec:
        s = sender(store, rec.url, clock)
        s.alert("k", "hello")
        asyncio.run(s.send_due())
        asyncio.run(s.stop())
    assert store.alerts()[0].next_try_at == clock.t + 30


def test_400_fails_at_once_and_is_not_tried_again(store: Store) -> None:
    clock = Clock()
    with receiving([400]) as rec:
        s = sender(store, rec.url, clock)
        s.alert("k", "hello")

        async def main() -> None:
            await s.send_due()
            clock.t += 10_000
            await s.send_due()
            await s.stop()
        asyncio.run(main())
    assert len(rec.bodies) == 1
    assert one(store) == ("failed", 1, "HTTP 400: ok")


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/services/T000/B000/s3cretPath"


def test_no_answer_is_retried_then_given_up_and_the_url_never_logged(
        store: Store, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    clock = Clock()
    s = sender(store, _closed_port_url(), clock, max_tries=2)
    s.alert("k", "hello")

    async def main() -> None:
        await s.send_due()
        assert one(store)[:2] == ("pending", 1)
        clock.t += 10_000
        await s.send_due()
        await s.stop()
    asyncio.run(main())
    state, tries, error = one(store)
    assert (state, tries) == ("failed", 2)
    assert error is not None and "ConnectError" in error and "gave up after 2 tries" in error
    assert "s3cretPath" not in caplog.text and "s3cretPath" not in error
    assert "alert k failed" in caplog.text


def test_without_a_stored_url_alerts_wait(store: Store) -> None:
    s = sender(store, None, Clock())
    s.alert("k", "hello")
    assert asyncio.run(s.send_due()) == 60.0
    assert one(store) == ("pending", 0, None)


def test_the_task_sends_an_alert_as_soon_as_it_is_added(store: Store) -> None:
    clock = Clock()
    with receiving() as rec:
        s = sender(store, rec.url, clock)

        async def main() -> None:
            s.start()
            await asyncio.sleep(0)
            s.alert("k", "hello")
            for _ in range(500):  # a wait with a timeout, not a timed assertion
                if rec.bodies and store.alerts()[0].state == "sent":
                    break
                await asyncio.sleep(0.01)
            await s.stop()
        asyncio.run(main())
    assert len(rec.bodies) == 1 and one(store)[0] == "sent"


def test_a_bad_key_is_refused(store: Store) -> None:
    s = sender(store, None, Clock())
    with pytest.raises(ValueError, match="key"):
        s.alert("", "hello")


@pytest.mark.parametrize("url", ["http://[bad/services/s3cretPath", "ftp://h/s3cretPath",
                                 "s3cretPath"])
def test_a_url_httpx_refuses_is_tried_again_and_never_shown(
        store: Store, url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    clock = Clock()
    s = sender(store, url, clock)
    s.alert("k", "hello")

    async def main() -> None:
        await s.send_due()
        await s.stop()
    asyncio.run(main())
    state, tries, error = one(store)
    assert (state, tries) == ("pending", 1)
    assert error and "s3cretPath" not in error and "s3cretPath" not in caplog.text
