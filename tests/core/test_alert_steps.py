"""core.alerts: what a webhook's answer means for an alert."""

from __future__ import annotations

import random

import pytest

from rota.core.alerts import after_try, backoff, payload, retry_after


def test_payload_is_slack_text_plus_facts() -> None:
    body = payload("quota 80 % used", kind="quota", key="quota:7:80", percent=80)
    assert body == {"text": "quota 80 % used",
                    "rota": {"kind": "quota", "key": "quota:7:80", "percent": 80}}
    with pytest.raises(ValueError, match="text"):
        payload("  ", kind="quota", key="k")


@pytest.mark.parametrize("status", [200, 201, 204])
def test_2xx_is_sent(status: int) -> None:
    assert after_try(status, None, tries=1, max_tries=3, now=10, wait=5).state == "sent"


@pytest.mark.parametrize("status", [None, 429, 500, 503])
def test_no_answer_429_and_5xx_are_tried_again_after_the_wait(status: int | None) -> None:
    step = after_try(status, "boom", tries=1, max_tries=3, now=10, wait=5)
    assert step == ("pending", 15, f"{'no answer' if status is None else f'HTTP {status}'}: boom")


def test_retry_after_beats_the_backoff() -> None:
    step = after_try(429, None, tries=1, max_tries=3, now=10, wait=5, retry_after_s=30)
    assert step.next_try_at == 40


@pytest.mark.parametrize("status", [400, 403, 404, 410, 301])
def test_other_answers_fail_at_once(status: int) -> None:
    step = after_try(status, "no", tries=1, max_tries=8, now=10, wait=5)
    assert step.state == "failed" and step.next_try_at is None
    assert f"HTTP {status}" in (step.error or "")


def test_given_up_after_max_tries() -> None:
    step = after_try(500, None, tries=3, max_tries=3, now=10, wait=5)
    assert step.state == "failed" and "gave up after 3 tries" in (step.error or "")


def test_backoff_doubles_up_to_the_cap_with_jitter_in_the_upper_half() -> None:
    rng = random.Random(1)
    for tries, base in [(1, 2), (2, 4), (3, 8), (10, 60)]:
        waits = [backoff(tries, first=2, cap=60, rng=rng) for _ in range(50)]
        assert all(base / 2 <= w <= base for w in waits)
        assert len(set(waits)) > 1  # jittered
    assert backoff(3, first=2, cap=60, rng=random.Random(7)) == backoff(
        3, first=2, cap=60, rng=random.Random(7))  # the seed decides


def test_retry_after_reads_seconds_and_dates() -> None:
    assert retry_after("120", now=0) == 120
    assert retry_after("Thu, 01 Jan 1970 00:01:40 GMT", now=40) == 60
    assert retry_after(None, now=0) is None
    assert retry_after("soon", now=0) is None
    assert retry_after("99999999", now=0) == 86_400  # cut to a day
