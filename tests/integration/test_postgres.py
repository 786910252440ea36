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


def test_jobs_end_once_when_postgres_drops_the_daemons_connections(daemon_factory, tmp_path):
    """The server ends every connection of the daemon (as a restart of PostgreSQL would)
    three times while 24 jobs run: batches fail to commit, the daemon takes its work up
    again from the store and the runner's records, and every job completes exactly once."""
    import time

    import psycopg

    from rota.store.repo import Store
    from rota_testing import wait_until

    gen = pg_database()
    url = next(gen)
    try:
        d = daemon_factory(simulate="2x24G", args=["--database-url", url]).start()
        marker = tmp_path / "runs"
        with d.client() as c:
            jobs = c.submit([{"command": ["sh", "-c", f"echo $ROTA_JOB_ID >> {marker}; "
                                          "sleep 1"], "gpus": 0.25}] * 24)
        ids = [j["id"] for j in jobs]
        name = url.rsplit("/", 1)[1]
        base = url.replace("postgresql+psycopg://", "postgresql://").rsplit("/", 1)[0]

        def drop_the_daemons_connections() -> bool:
            with psycopg.connect(base + "/postgres", autocommit=True) as conn:
                ended = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM "
                                     "pg_stat_activity WHERE datname = %s", (name,)).fetchone()
            return ended is not None and ended[0] >= 1

        for _ in range(3):
            time.sleep(0.5)
            # right after a drop the daemon may not have connected again yet
            wait_until(drop_the_daemons_connections, timeout=20, every=0.05,
                       what="a connection of the daemon's to end")
        store = Store.open(url)
        try:
            def states() -> set[str]:
                return {store.get_job(i).state for i in ids}

            wait_until(lambda: states() == {"completed"}, timeout=60, what="every job to end")
            ran = marker.read_text().split()
            assert sorted(ran, key=int) == [str(i) for i in ids]  # each exactly once
            assert all(store.get_job(i).attempts == 1 for i in ids)
        finally:
            store.close()
        with d.client() as c:  # and it serves on
            [late] = c.submit([{"command": ["true"]}])
            assert c.wait(late["id"], timeout=30)["state"] == "completed"
        d.stop()
    finally:
        next(gen, None)
