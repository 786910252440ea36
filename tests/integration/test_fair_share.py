"""Fair share through the real daemon: two users flooding 2 simulated GPUs with short jobs
get GPU-seconds (summed from the attempts) in the ratio of their shares; usage survives a
restart; `rota share` and `rota priority` show it. SQLite, and PostgreSQL when
ROTA_TEST_PG_URL names a server."""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import rota
from rota.client.raw import RawClient
from rota.errors import Conflict
from rota.store.repo import Store
from rota_testing import DaemonProcess, free_port, pg_database, wait_until

TOML = """\
listen = "127.0.0.1:{port}"
shared_account = true
[priority]
fair_share = true
half_life = "8s"
weight_age = 0
refresh = 0.2
"""


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | None]:
    if request.param == "sqlite":
        yield None
    else:
        yield from pg_database()


def _daemon(daemon_factory: type[DaemonProcess], home: Path, url: str | None, port: int
            ) -> DaemonProcess:
    home.mkdir(parents=True, exist_ok=True)
    (home / "rota.toml").write_text(TOML.format(port=port))
    args = ["--database-url", url] if url else []
    return daemon_factory(simulate="2x24G", home=home, args=args).start()


def _gpu_seconds(url: str, users: tuple[str, str]) -> tuple[float, float]:
    store = Store.open(url)
    try:
        recs = store.usage(0.0, time.time() + 1)
    finally:
        store.close()
    got = {u: sum(r.gpus * ((r.ended_at or time.time()) - r.started_at) for r in recs
                  if r.user == u) for u in users}
    return got[users[0]], got[users[1]]


def test_two_users_flooding_the_queue_get_their_shares(daemon_factory, tmp_path: Path,
                                                      db_url: str | None) -> None:
    home, port = tmp_path / "home", free_port()
    d = _daemon(daemon_factory, home, db_url, port)
    url = db_url or f"sqlite:///{home / 'rota.db'}"
    with d.client() as owner:
        ann = owner.request("GET", "/v1/whoami")["user"]
        owner.add_user("bob")
        token = owner.create_token("bob", None)["token"]
        owner.set_share(ann, 2)
        owner.set_share("bob", 1)
        job = {"command": ["sleep", "0.3"], "gpus": 1}
        with RawClient(url=f"http://127.0.0.1:{port}", token=token) as bob:
            # bob floods first: submission order alone would give him everything
            bob_jobs = bob.submit([job] * 150)
            owner.submit([job] * 150)
            # `rota why` names fair share when a later job of ann's goes ahead of bob's
            last = bob_jobs[-1]["id"]
            said: list[str] = []

            def names_fair_share() -> bool:
                said.append(owner.why(last)["message"])
                return "fair-share factor" in said[-1]

            wait_until(names_fair_share, timeout=20, what="why naming fair share")
            # as many digits as tell the two apart (never two equal numbers with "<")
            factors = (rf"[01]\.\d{{2,4}} < {ann}'s [01]\.\d{{2,4}}|"
                       rf"[01]\.\d\d, slightly lower than {ann}'s")
            assert re.match(rf"waits behind job \d+ of {ann}: bob's fair-share factor "
                            rf"({factors}) \(bob used \d+\.\d GPU-h of "
                            r"a 33% share this week\); ", said[-1]), said[-1]
            shown = re.search(r"factor ([01]\.\d+) < \S+ ([01]\.\d+)", said[-1])
            assert shown is None or shown[1] != shown[2], said[-1]
            # both keep jobs waiting throughout; stop before either runs out
            wait_until(lambda: sum(_gpu_seconds(url, (ann, "bob"))) >= 30, timeout=90,
                       what="30 GPU-seconds used")
            ann_s, bob_s = _gpu_seconds(url, (ann, "bob"))
        ids = [j["id"] for j in owner.queue(limit=1000, counts=False)["waiting_jobs"]]
        for i in ids:
            with contextlib.suppress(Conflict):  # it may have started and ended since
                owner.cancel(i)
    print(f"GPU-seconds: {ann} {ann_s:.1f}, bob {bob_s:.1f}, ratio {ann_s / bob_s:.3f}")
    assert ann_s / bob_s == pytest.approx(2.0, rel=0.10), (ann_s, bob_s)

    # `rota share` shows both with their shares; the factors survive a restart (decay
    # scales everyone's usage alike, so the parts, and the factors, stay)
    wait_until(lambda: _nothing_runs(d), timeout=20, what="no job running")
    before = _shares(d)
    assert before[ann]["shares"] == 2 and before["bob"]["shares"] == 1
    assert before[ann]["usage_gpu_hours"] > before["bob"]["usage_gpu_hours"] > 0
    text = d.cli("share")
    assert text.returncode == 0, text.stderr
    assert "bob" in text.stdout and "factor" in text.stdout
    assert "the queue is ordered by fair share" in text.stdout
    d.stop()
    d.start()
    after = _shares(d)
    for who in (ann, "bob"):
        assert after[who]["factor"] == pytest.approx(before[who]["factor"], abs=0.02)
        assert after[who]["shares"] == before[who]["shares"]


def _nothing_runs(d: DaemonProcess) -> bool:
    with d.client() as c:
        return c.health()["running"] == 0


def _shares(d: DaemonProcess) -> dict[str, dict[str, float]]:
    r = d.cli("share", "--json")
    assert r.returncode == 0, r.stderr
    return {a["name"]: a for a in json.loads(r.stdout)["accounts"] if a["kind"] == "user"}


def test_rota_priority_shows_each_factor_and_the_sum(daemon_factory, tmp_path: Path) -> None:
    home = tmp_path / "home"
    d = _daemon(daemon_factory, home, None, free_port())
    with d.client() as c:
        long = c.submit([{"command": ["sleep", "30"], "gpus": 2}])[0]
        wait_until(lambda: c.job(long["id"])["state"] == "running", what="the long job")
        waiting = c.submit([{"command": ["true"], "gpus": 1, "priority": 3}])[0]
        answer = c.priority(waiting["id"])
    factors = {f["name"]: f for f in answer["factors"]}
    assert set(factors) == {"priority", "age", "size", "fair_share"}
    assert answer["total"] == pytest.approx(sum(f["weighted"] for f in factors.values()))
    assert factors["fair_share"]["weight"] == 1000 and factors["age"]["weight"] == 0
    # the one user has used all there was of everything: factor 2 ** -1
    assert factors["fair_share"]["factor"] == pytest.approx(0.5, abs=0.01)
    r = d.cli("priority", str(waiting["id"]))
    assert r.returncode == 0, r.stderr
    for words in ("priority", "fair share", "total", f"job {waiting['id']}"):
        assert words in r.stdout
    with rota.Client(d.socket) as typed:  # the SDK's typed answers
        p = typed.priority(waiting["id"])
        assert p.total == pytest.approx(answer["total"], rel=0.01)
        assert [f.name for f in p.factors] == ["priority", "age", "size", "fair_share"]
        s = typed.set_share("vision", 3, project=True)
        assert s.fair_share and ("project", "vision", 3.0) in [
            (a.kind, a.name, a.shares) for a in s.accounts]
    bad = d.cli("priority", str(long["id"]))
    assert bad.returncode != 0 and "only a waiting job has a priority" in bad.stderr
