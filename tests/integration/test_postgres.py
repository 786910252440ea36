"""The daemon on PostgreSQL, end to end, including a crash and restart."""

from __future__ import annotations

from rota_testing import pg_database


def test_daemon_runs_and_recovers_on_postgres(daemon_factory):
    gen = pg_database()
    url = next(gen)
    try:
        d = daemon_factory(simulate="2x24G", args=["--database-url", url]).start()
        with d.client() as c:
            quick, slow = c.submit([{"command": ["true"], "gpus": 0.5},
                                    {"command": ["sleep", "4"], "gpus": 1}])
            assert c.wait(quick["id"], timeout=30)["state"] == "completed"
        d.kill()
        d.start()
        with d.client() as c:
            assert c.wait(slow["id"], timeout=60)["state"] == "completed"
            kinds = [e["kind"] for e in c.events(slow["id"])]
            assert "adopted" in kinds or kinds.count("running") == 1
        d.stop()
    finally:
        next(gen, None)
