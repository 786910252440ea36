"""EngineBackend over an in-memory engine: fast and deterministic (the poller is driven by
hand through ``poll_once``; its thread would wait an hour)."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rota.backends.base import ExitInfo, Handle, Launched, LaunchFailed, LaunchRequest
from rota.backends.engine import EngineJob, EngineState, EngineStatus
from rota.backends.engine_backend import EngineBackend
from rota.backends.engine_poller import OnStart
from rota.backends.engine_record import key_of, state_path
from rota.errors import BackendError
from rota_testing import wait_until

from .fake import FakeEngine, request


class Cluster:
    """One fake cluster that outlives the adapters (daemons) built over it."""

    def __init__(self, home: Path,
                 make_engine: Callable[[Callable[[str], str]], FakeEngine] = FakeEngine,
                 ) -> None:
        self.home, self.make_engine = home, make_engine
        self.engine: FakeEngine | None = None
        self.adapters: list[EngineBackend] = []

    def adapter(self, poll_every: float = 3600.0, install: str = "",
                on_start: OnStart | None = None) -> EngineBackend:
        def make(secrets):  # type: ignore[no-untyped-def]
            if self.engine is None:
                self.engine = self.make_engine(secrets)
            self.engine.secrets = secrets  # the new daemon's lookup
            return self.engine
        a = EngineBackend("hpc", make, poll_every=poll_every, install=install,
                          on_start=on_start)
        self.adapters.append(a)
        return a

    @property
    def fake(self) -> FakeEngine:
        assert self.engine is not None
        return self.engine

    def req(self, job_id: int, attempt: int = 1, *, env: dict[str, str] | None = None,
            secret_env: dict[str, str] | None = None, install: str = "",
            home: Path | None = None) -> LaunchRequest:
        job = EngineJob(job_id=job_id, attempt=attempt, name=f"j{job_id}", argv=("train",),
                        secret_env=secret_env or {}, grace=12.0, install=install)
        return request(home or self.home, job, env)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    for a in c.adapters:
        a.close()


def readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def log_text(req: LaunchRequest) -> str:
    return req.log_path.read_text()


def test_a_launch_submits_once_and_the_handle_names_the_engine_job(cluster: Cluster) -> None:
    a = cluster.adapter()
    req = cluster.req(7, 2)
    h = a.launch(req)
    assert a.name == "fake:hpc" and a.capabilities.engine and a.capabilities.launch_blocks
    assert (h.backend, h.pid, h.status_path) == ("fake:hpc", 0, str(req.status_path))
    assert h.extra == {"engine_id": "100", "pool": "hpc", "key": "rota-7-2", "grace": 12.0,
                       "log_path": str(req.log_path)}
    assert Handle.from_json(json.loads(json.dumps(h.to_json()))) == h
    # a fresh attempt has no record of an earlier try: nothing to find first
    assert [op for op, _ in cluster.fake.calls] == ["submit"]
    assert log_text(req) == "=== rota: job 7 attempt 2\n"
    assert json.loads(state_path(req.status_path).read_text())["engine_id"] == "100"


def test_a_daemon_killed_after_the_submit_finds_the_job_instead_of_submitting_again(
        cluster: Cluster) -> None:
    a = cluster.adapter()
    req = cluster.req(8)
    cluster.adapter()  # makes the engine
    cluster.fake.after_submit = lambda eid: (_ for _ in ()).throw(KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):  # killed before the engine's answer was recorded
        a.launch(req)
    assert cluster.fake.count("submit") == 1
    cluster.fake.after_submit = None
    again = cluster.adapter().launch(req)
    assert cluster.fake.count("submit") == 1 and cluster.fake.count("find") == 1
    assert again.extra["engine_id"] == "100"
    assert log_text(req) == "=== rota: job 8 attempt 1\n"  # the header once


def test_the_daemon_is_told_once_when_the_engine_starts_a_job_it_watches(
        cluster: Cluster) -> None:
    told: list[tuple[str, float | None]] = []
    a = cluster.adapter(on_start=lambda path, at: told.append((path, at)))
    req, other = cluster.req(1), cluster.req(2)
    h, h2 = a.launch(req), a.launch(other)
    a.watch(h)
    a.poll_once()
    assert told == []  # queued in the engine
    cluster.fake.run("100")
    cluster.fake.run("101")  # runs, but the daemon does not watch it yet: not told
    a.poll_once()
    a.poll_once()
    assert told == [(str(req.status_path), 1000.0)]
    a.watch(h2)  # watched now: told at once
    assert told[1:] == [(str(other.status_path), 1000.0)]
    cluster.fake.end("100", 0)
    a.poll_once()
    assert len(told) == 2
    # a restarted daemon's adapter tells again (the time limit is armed anew), and a job
    # that ended in the engine's queue without a start is not told at all
    again: list[tuple[str, float | None]] = []
    b = cluster.adapter(on_start=lambda path, at: again.append((path, at)))
    never = b.launch(cluster.req(3))
    cluster.fake.states["102"] = EngineStatus("102", EngineState.ENDED, exit_code=None,
                                              reason="CANCELLED")
    found = b.locate(h, str(req.status_path), 0).handle
    b.poll_once()
    for handle in (found, never):
        assert handle is not None and b.watch(handle) is None  # both ended
    assert again == [(str(req.status_path), 1000.0)]


def test_one_poll_asks_about_every_followed_job_at_once(cluster: Cluster) -> None:
    a = cluster.adapter()
    handles = [a.launch(cluster.req(i)) for i in range(1, 6)]
    fds = [a.watch(h) for h in handles]
    a.poll_once()
    polls = [ids for op, ids in cluster.fake.calls if op == "poll"]
    assert polls == [[h.extra["engine_id"] for h in handles]]
    assert all(fd is not None and not readable(fd) for fd in fds)
    assert a.status(handles[0]).reason == "Priority"  # type: ignore[union-attr]


def test_the_watch_fd_turns_readable_at_the_end_and_collect_gives_the_exit(
        cluster: Cluster) -> None:
    a = cluster.adapter()
    ok, bad = a.launch(cluster.req(1)), a.launch(cluster.req(2))
    fd_ok, fd_bad = a.watch(ok), a.watch(bad)
    assert fd_ok is not None and fd_bad is not None
    cluster.fake.run("100")
    cluster.fake.run("101")
    a.poll_once()
    assert not readable(fd_ok) and a.collect(ok) is None and a.is_alive(ok)
    st = a.status(ok)
    assert st is not None and (st.state, st.started_at) == (EngineState.RUNNING, 1000.0)
    cluster.fake.end("100", 0)
    cluster.fake.end("101", 3)
    a.poll_once()
    assert readable(fd_ok) and readable(fd_bad)
    assert a.collect(ok, os.read(fd_ok, 4096)) == ExitInfo(0, None, 1010.0)
    assert a.collect(bad) == ExitInfo(3, None, 1010.0) and not a.is_alive(bad)
    assert a.watch(ok) is None  # ended already
    a.poll_once()
    assert [ids for op, ids in cluster.fake.calls if op == "poll"][-1:] == [["100", "101"]]
    assert cluster.fake.count("poll") == 2  # ended jobs are not polled again
    for fd in (fd_ok, fd_bad):
        os.close(fd)


def test_a_job_the_engine_lost_reads_as_killed(cluster: Cluster) -> None:
    a = cluster.adapter()
    h = a.launch(cluster.req(1))
    fd = a.watch(h)
    cluster.fake.forget("100")
    a.poll_once()
    assert fd is not None and readable(fd)
    assert a.collect(h) == ExitInfo(None, int(signal.SIGKILL), None)
    os.close(fd)


def test_output_is_copied_once_in_order_across_polls_and_a_restart(cluster: Cluster) -> None:
    first = cluster.adapter()
    req = cluster.req(3)
    h = first.launch(req)
    first.watch(h)
    cluster.fake.run("100", b"epoch 1\n")
    first.poll_once()
    cluster.fake.run("100", b"epoch 2\n")
    first.poll_once()
    assert log_text(req).endswith("epoch 1\nepoch 2\n")
    first.close()  # the daemon stops; the job goes on
    cluster.fake.run("100", b"epoch 3\n")
    second = cluster.adapter()
    found = second.locate(h, str(req.status_path), 0.0)
    assert found.handle == h and found.ended is None  # still running: copied up to now
    fd = second.watch(h)
    cluster.fake.run("100", b"done\n")
    cluster.fake.end("100")
    second.poll_once()
    assert fd is not None and readable(fd)
    assert log_text(req) == "=== rota: job 3 attempt 1\nepoch 1\nepoch 2\nepoch 3\ndone\n"
    os.close(fd)


def test_output_appended_just_before_a_crash_is_not_copied_twice(cluster: Cluster) -> None:
    first = cluster.adapter()
    req = cluster.req(4)
    h = first.launch(req)
    cluster.fake.run("100", b"abcdefgh")
    first.poll_once()
    first.close()
    record = json.loads(state_path(req.status_path).read_text())
    with open(req.log_path, "ab") as fh:  # appended, and the daemon died before recording it
        fh.write(b"ij")
    assert record["offset"] == 8
    cluster.fake.run("100", b"ijkl")
    cluster.fake.end("100")
    assert cluster.adapter().locate(h, str(req.status_path), 0.0).ended == ExitInfo(
        0, None, 1010.0)
    assert log_text(req) == "=== rota: job 4 attempt 1\nabcdefghijkl"


def test_locate_without_a_handle_finds_the_job_by_its_record_or_its_key(
        cluster: Cluster) -> None:
    a = cluster.adapter()
    req = cluster.req(5, 3)
    h = a.launch(req)
    a.close()
    b = cluster.adapter()
    assert b.locate(None, str(req.status_path), 0.0).handle == h  # from the record
    assert cluster.fake.count("find") == 0
    state_path(req.status_path).unlink()  # lost: only the engine's key is left
    assert key_of(req.status_path) == "rota-5-3"
    found = cluster.adapter().locate(None, str(req.status_path), 0.0)
    assert found.handle is not None and found.handle.extra["engine_id"] == "100"
    assert found.handle.extra["log_path"] == str(req.log_path)
    assert cluster.fake.count("find") == 1
    never = cluster.adapter().locate(None, str(cluster.req(6).status_path), 0.0)
    assert never.handle is None and cluster.fake.count("submit") == 1


def test_locate_reports_a_job_that_ended_while_the_daemon_was_down(cluster: Cluster) -> None:
    a = cluster.adapter()
    req = cluster.req(9)
    h = a.launch(req)
    a.close()
    cluster.fake.run("100", b"last words\n")
    cluster.fake.end("100", 2)
    found = cluster.adapter().locate(h, str(req.status_path), 0.0)
    assert found.ended == ExitInfo(2, None, 1010.0)
    assert log_text(req).endswith("last words\n")


def test_secrets_reach_their_own_job_only_and_are_never_written(cluster: Cluster) -> None:
    a = cluster.adapter()
    reqs = [cluster.req(i, env={"TOKEN": f"s3cr3t-value-{i}"}, secret_env={"TOKEN": "tok"})
            for i in (1, 2)]
    handles = [a.launch(r) for r in reqs]
    fake = cluster.fake
    assert fake.seen_env == {"100": {"TOKEN": "s3cr3t-value-1"},
                             "101": {"TOKEN": "s3cr3t-value-2"}}
    names = [dict(fake.jobs[h.extra["engine_id"]].secret_env) for h in handles]
    assert names == [{"TOKEN": "job1.1.TOKEN"}, {"TOKEN": "job2.1.TOKEN"}]
    with pytest.raises(KeyError):  # gone once the submit is through
        fake.secrets("job1.1.TOKEN")
    for h in handles:
        a.watch(h)
    fake.run("100", b"x")
    a.poll_once()
    written = b"".join(p.read_bytes() for p in cluster.home.rglob("*") if p.is_file())
    assert b"x" in written and b"s3cr3t" not in written
    missing = a.launch_many([cluster.req(3, secret_env={"TOKEN": "tok"})])
    assert missing == [LaunchFailed("job 3: no value for the secret variable TOKEN")]


def test_refusals_fail_for_good_and_an_unreachable_engine_may_be_retried(
        cluster: Cluster) -> None:
    a = cluster.adapter()
    cluster.fake.refuse = "no such partition"
    with pytest.raises(BackendError, match="job 1: no such partition"):
        a.check(cluster.req(1))
    assert a.launch_many([cluster.req(1)]) == [LaunchFailed("job 1: no such partition")]
    cluster.fake.refuse = None
    cluster.fake.down = 1
    [failed] = a.launch_many([cluster.req(2)])
    assert isinstance(failed, LaunchFailed) and failed.retryable
    assert "the controller did not answer" in failed.reason
    req = cluster.req(3)
    no_job = LaunchRequest(**{**{f: getattr(req, f) for f in req.__slots__},
                              "engine_job": None})
    with pytest.raises(BackendError, match="runs engine jobs only"):
        a.check(no_job)


def test_launch_later_answers_on_the_event_loop(cluster: Cluster) -> None:
    a = cluster.adapter()

    async def go() -> list[tuple[int, object]]:
        got: list[tuple[int, object]] = []
        done = asyncio.Event()

        def answered(i: int, outcome: object) -> None:
            got.append((i, outcome))
            if len(got) == 2:
                done.set()
        assert a.launch_later([cluster.req(1), cluster.req(2)], answered)
        await asyncio.wait_for(done.wait(), 10)
        return got

    got = asyncio.run(go())
    assert [i for i, _ in got] == [0, 1]
    assert all(isinstance(o, Launched) for _, o in got)
    assert [key for op, key in cluster.fake.calls if op == "submit"] == ["rota-1-1", "rota-2-1"]


def test_signals_become_the_engines_stop_handshake(cluster: Cluster) -> None:
    a = cluster.adapter()
    h = a.launch(cluster.req(1))
    a.signal(h, signal.SIGUSR1)
    a.signal(h, signal.SIGKILL)
    a.close()  # waits for the stops asked for
    stops = [args for op, args in cluster.fake.calls if op == "stop"]
    assert stops == [("100", "SIGUSR1", 12.0), ("100", "SIGKILL", 0.0)]


def test_tidy_drops_the_records_of_ended_attempts(cluster: Cluster) -> None:
    a = cluster.adapter()
    done, live = cluster.req(1), cluster.req(2)
    h_done, h_live = a.launch(done), a.launch(live)
    a.watch(h_live)
    cluster.fake.end(h_done.extra["engine_id"])
    a.locate(h_done, h_done.status_path, 0.0)
    a.poll_once()
    assert a.status(h_done) is not None
    a.tidy(cluster.home / "status", {str(live.status_path)})
    assert not state_path(done.status_path).exists()
    assert state_path(live.status_path).exists()
    assert a.status(h_done) is None and a.status(h_live) is not None


def test_the_poller_thread_outlives_engine_errors_and_stops_on_close(cluster: Cluster) -> None:
    a = cluster.adapter(poll_every=0.01)
    h = a.launch(cluster.req(1))
    cluster.fake.down = 3
    fd = a.watch(h)
    assert fd is not None
    cluster.fake.end("100", 0)
    wait_until(lambda: readable(fd), 10, what="the watch fd")
    assert a.collect(h) == ExitInfo(0, None, 1010.0)
    assert cluster.fake.down == 0  # it failed three times and went on
    a.close()
    polls = cluster.fake.count("poll")
    a.poll_once()  # nothing followed: no call
    assert cluster.fake.count("poll") == polls
    os.close(fd)


def test_two_installations_never_share_a_key(cluster: Cluster, tmp_path: Path) -> None:
    """Job ids start at 1 in every Rota home: job 1's first attempt of another home (or of
    a home made anew) is another engine job, found by its own key after a restart."""
    first = cluster.adapter(install="a1b2c3d4")
    second = cluster.adapter(install="e5f6a7b8")
    mine = cluster.req(1, install="a1b2c3d4", home=tmp_path / "home-a")
    theirs = cluster.req(1, install="e5f6a7b8", home=tmp_path / "home-b")
    h1, h2 = first.launch(mine), second.launch(theirs)
    assert (h1.extra["key"], h2.extra["key"]) == ("rota-a1b2c3d4-1-1", "rota-e5f6a7b8-1-1")
    assert h1.extra["engine_id"] != h2.extra["engine_id"] and cluster.fake.count("submit") == 2
    state_path(theirs.status_path).unlink()  # its record lost: only its key finds it
    again = cluster.adapter(install="e5f6a7b8").locate(None, str(theirs.status_path), 0.0)
    assert again.handle is not None and again.handle.extra["engine_id"] == h2.extra["engine_id"]

