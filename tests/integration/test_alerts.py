"""Webhook alerts through the real daemon: `rota alerts test` reaches a local receiver
once; an alert the daemon could not send before a SIGKILL is sent once after its restart;
the webhook's URL never shows in the daemon's log or the API's answers."""

from __future__ import annotations

import json
from pathlib import Path

from receiver import receiving
from rota.answers import AlertAnswer
from rota_testing import DaemonProcess, free_port, wait_until

TOML = """
[alerts]
webhook_secret = "SLACK_WEBHOOK"
first_backoff = 0.2
max_backoff = 0.5
"""


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / "rota.toml").write_text(TOML)
    return home


def _set_url(d: DaemonProcess, url: str) -> None:
    r = d.cli("secret", "set", "SLACK_WEBHOOK", stdin=url + "\n")
    assert r.returncode == 0, r.stderr


def _alerts(d: DaemonProcess) -> list[dict[str, object]]:
    r = d.cli("alerts", "--json")
    assert r.returncode == 0, r.stderr
    assert "s3cretPath" not in r.stdout
    return list(json.loads(r.stdout)["alerts"])


def test_rota_alerts_test_reaches_the_receiver_once(
        tmp_path: Path, daemon_factory: type[DaemonProcess]) -> None:
    d = daemon_factory(home=_home(tmp_path)).start()
    with receiving() as rec:
        _set_url(d, rec.url)
        r = d.cli("alerts", "test", "--text", "hello from the test", "--json")
        assert r.returncode == 0, r.stderr
        assert "s3cretPath" not in r.stdout
        alert_id = json.loads(r.stdout)["id"]
        (sent,) = wait_until(lambda: [a for a in _alerts(d) if a["state"] == "sent"],
                             what="the alert marked sent")
        assert sent["id"] == alert_id and sent["attempts"] == 1
        assert set(sent) == set(AlertAnswer.__annotations__)  # the typed answer, no more
        assert [b["text"] for b in rec.bodies] == ["hello from the test"]
        assert rec.bodies[0]["rota"]["kind"] == "test"
        assert rec.paths == ["/services/T000/B000/s3cretPath"]
        listed = d.cli("alerts")
        assert listed.returncode == 0 and "sent" in listed.stdout, listed.stderr
    assert "s3cretPath" not in d.log_text()


def test_an_alert_unsent_at_a_sigkill_is_sent_once_after_the_restart(
        tmp_path: Path, daemon_factory: type[DaemonProcess]) -> None:
    port = free_port()  # nothing listens on it yet: the receiver is down
    d = daemon_factory(home=_home(tmp_path)).start()
    url = f"http://127.0.0.1:{port}/services/T000/B000/s3cretPath"
    _set_url(d, url)
    r = d.cli("alerts", "test", "--json")
    assert r.returncode == 0, r.stderr
    wait_until(lambda: [a for a in _alerts(d) if a["attempts"] and a["state"] == "pending"
                        and "ConnectError" in str(a["last_error"])],
               what="a failed try, the alert still pending")
    d.kill()
    with receiving(port=port) as rec:
        d.start()
        (sent,) = wait_until(lambda: [a for a in _alerts(d) if a["state"] == "sent"],
                             what="the alert sent after the restart")
        assert int(str(sent["attempts"])) >= 2
        assert len(rec.bodies) == 1
        assert rec.bodies[0]["text"].startswith("Test alert from Rota")
    assert "s3cretPath" not in d.log_text()


def test_without_a_webhook_a_test_alert_says_what_to_set(daemon: DaemonProcess) -> None:
    r = daemon.cli("alerts", "test")
    assert r.returncode != 0
    assert "webhook_secret" in r.stderr + r.stdout


def test_sdk_sync_and_async_and_who_sees_what(
        tmp_path: Path, daemon_factory: type[DaemonProcess]) -> None:
    import asyncio

    import pytest

    import rota
    from rota.errors import Forbidden

    port = free_port()
    d = daemon_factory(home=_home(tmp_path), args=["--listen", f"127.0.0.1:{port}"]).start()
    with receiving() as rec:
        _set_url(d, rec.url)
        with rota.Client(d.socket) as c:
            me = c.whoami().user
            made = c.test_alert("from the SDK")
            assert (made.kind, made.user, made.text) == ("test", me, "from the SDK")
            wait_until(lambda: c.alerts()[0].state == "sent", what="the alert sent")

        async def listed() -> list[rota.Alert]:
            async with rota.AsyncClient(d.socket) as a:
                return await a.alerts()
        (got,) = asyncio.run(listed())
        assert got.id == made.id and got.sent_at is not None and got.next_try_at is None
        assert len(rec.bodies) == 1
    assert d.cli("user", "add", "bob").returncode == 0
    r = d.cli("token", "create", "--user", "bob", "--json")
    assert r.returncode == 0, r.stderr
    with rota.Client(url=f"http://127.0.0.1:{port}", token=json.loads(r.stdout)["token"]) as bob:
        assert bob.alerts() == []  # the admin's test alert is not his
        with pytest.raises(Forbidden):
            bob.alerts(user=me)
        with pytest.raises(Forbidden):
            bob.test_alert()


def test_a_producer_in_the_daemon_alerts_once_per_key(tmp_path: Path) -> None:
    """Daemon.alert, as the quota code calls it inside a batch: stored with the batch,
    sent after its commit, a second call with the key a no-op."""
    import asyncio

    from rota_testing import in_process_daemon, until

    async def main() -> None:
        async with in_process_daemon(tmp_path) as (d, store):
            with receiving() as rec:
                d.alerts.url = lambda: rec.url
                with d.batch():
                    assert d.alert("quota:7:2026-W48:80", "ann: 80 % of her quota",
                                   kind="quota", user="ann", percent=80)
                    assert not d.alert("quota:7:2026-W48:80", "again", kind="quota")
                await until(lambda: store.alerts()[0].state == "sent", "the alert sent")
                assert not d.alert("quota:7:2026-W48:80", "after it was sent")
                await asyncio.sleep(0)
                assert [b["rota"]["percent"] for b in rec.bodies] == [80]
    asyncio.run(main())
