"""Every submit carries an idempotency key and is sent again with the same one when its
connection fails (rota.client._submits); the error says only what is known."""

from __future__ import annotations

from typing import Any

import pytest

import rota
from rota.client import RawClient, _submits
from rota.client._endpoint import Endpoint
from rota.errors import DaemonUnavailable

ENDPOINT = Endpoint.resolve("/nonexistent/rota.sock")


@pytest.fixture(autouse=True)
def _no_pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    pauses: list[float] = []
    monkeypatch.setattr(_submits.time, "sleep", pauses.append)
    return pauses


def _failing(failures: list[DaemonUnavailable], answer: Any, keys: list[str]) -> Any:
    def request(method: str, path: str, **kw: Any) -> Any:
        keys.append(kw["json"]["idempotency_key"])
        if failures:
            raise failures.pop(0)
        return answer
    return request


def test_a_broken_submit_is_sent_again_with_the_same_key(
        monkeypatch: pytest.MonkeyPatch, _no_pauses: list[float]) -> None:
    keys: list[str] = []
    c = RawClient("/nonexistent/rota.sock")
    broken = [ENDPOINT.broken(ConnectionResetError()), ENDPOINT.too_slow(TimeoutError())]
    monkeypatch.setattr(c._t, "request", _failing(broken, {"jobs": [{"id": 7}]}, keys))
    assert c.submit([{"command": ["true"]}]) == [{"id": 7}]
    assert len(keys) == 3 and len(set(keys)) == 1 and keys[0].startswith("auto-")
    assert _no_pauses == [0.25, 0.5]
    c.submit([{"command": ["true"]}])  # another submit: another key
    assert keys[-1] != keys[0]
    c.submit([{"command": ["true"]}], idempotency_key="mine")
    assert keys[-1] == "mine"


def test_the_sdk_client_sends_its_key_again_too(monkeypatch: pytest.MonkeyPatch) -> None:
    keys: list[str] = []
    c = rota.Client("/nonexistent/rota.sock")
    job = {"id": 3, "name": "x", "command": ["true"], "user": "u", "state": "pending",
           "priority": 0, "gpus": 0.0, "gpu_mem": None, "created_at": 1.0}
    monkeypatch.setattr(c._t, "request", _failing(
        [ENDPOINT.broken(ConnectionResetError())], {"jobs": [job]}, keys))
    got = c.submit({"command": ["true"]}, idempotency_key="k1")
    assert got.id == 3 and keys == ["k1", "k1"]


def test_giving_up_says_only_what_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    c = RawClient("/nonexistent/rota.sock")
    def refused(n: int) -> list[DaemonUnavailable]:
        return [ENDPOINT.not_answering(ConnectionRefusedError()) for _ in range(n)]

    monkeypatch.setattr(c._t, "request", _failing(refused(_submits.TRIES), None, []))
    with pytest.raises(DaemonUnavailable, match="nothing was stored") as e:
        c.submit([{"command": ["true"]}])
    assert not e.value.maybe_done
    cut = [ENDPOINT.broken(ConnectionResetError()), *refused(_submits.TRIES - 1)]
    monkeypatch.setattr(c._t, "request", _failing(cut, None, []))
    with pytest.raises(DaemonUnavailable, match="may or may not have stored") as e:
        c.submit([{"command": ["true"]}], idempotency_key="k2")
    assert e.value.maybe_done and "k2" in str(e.value)
