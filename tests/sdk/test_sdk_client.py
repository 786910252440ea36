"""`rota.Client` against a real daemon on simulated GPUs, over its Unix socket."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sdk_helpers import PY, Sdk, held, printer

import rota
import rota_testing
from rota import JobState
from rota.client import RawClient
from rota.errors import (
    Conflict,
    DaemonUnavailable,
    InvalidSpec,
    NotFound,
    RotaError,
    WaitTimeout,
)

Unique = Callable[[str], str]


# --- submit --------------------------------------------------------------------------------

def test_submit_one_by_dict_or_keywords_and_many_by_list(client: rota.Client,
                                                         unique: Unique) -> None:
    one = client.submit(held(unique("one")))
    assert isinstance(one, rota.Job)
    assert one.state is JobState.HELD and one.name == unique("one") and one.gpus == 0
    kw = client.submit(command=["true"], gpus=0.5, name=unique("kw"), hold=True, priority=4)
    assert (kw.gpus, kw.priority, kw.state) == (0.5, 4, JobState.HELD)
    many = client.submit([held(unique("many")), held(unique("many"))])
    assert [type(j) for j in many] == [rota.Job, rota.Job]
    assert many[0].id < many[1].id and one.id < kw.id < many[0].id
    # a base spec and keyword overrides combine
    merged = client.submit(held(unique("base")), name=unique("merged"))
    assert merged.name == unique("merged")


def test_the_same_idempotency_key_answers_the_same_job(client: rota.Client,
                                                       unique: Unique) -> None:
    key = unique("key")
    first = client.submit(held(unique("idem")), idempotency_key=key)
    again = client.submit(held(unique("idem-other")), idempotency_key=key)
    assert again.id == first.id and again.name == first.name


# --- list ----------------------------------------------------------------------------------

def test_list_filters_and_pages_through_more_than_a_page(client: rota.Client,
                                                         unique: Unique) -> None:
    name = unique("page")
    ids = [j.id for j in client.submit([held(name) for _ in range(7)])]
    other = client.submit(held(unique("other")))

    page = client.list(name=name, limit=3)
    assert isinstance(page, rota.Page)
    assert [j.id for j in page.items] == ids[::-1][:3]  # newest first
    assert page.next == ids[-3]
    second = client.list(name=name, limit=3, before=page.next)
    assert [j.id for j in second.items] == ids[::-1][3:6]

    walked = list(client.iter_jobs(name=name, page_size=3))
    assert [j.id for j in walked] == ids[::-1]
    assert other.id not in {j.id for j in walked}

    assert {j.id for j in client.list("held", name=name).items} == set(ids)
    assert client.list(["running", JobState.COMPLETED], name=name).items == []
    me = client.whoami().user
    assert len(client.list(user=me, name=name).items) == 7
    assert client.list(user="nobody-at-all", name=name).items == []


# --- one job -------------------------------------------------------------------------------

def test_get_why_and_events_of_a_held_job(client: rota.Client, unique: Unique) -> None:
    job = client.submit(held(unique("look")), env={"A": "1"})
    detail = client.get(job)  # a Job works where an id does
    assert isinstance(detail, rota.JobDetail)
    assert detail.id == job.id and detail.spec["command"] == ["true"]
    assert detail.spec["env"] == {"A": "1"} and detail.attempts == 0
    assert detail.reason is not None and detail.reason.code == "held"
    why = client.why(job.id)
    assert isinstance(why, rota.Why)
    assert (why.id, why.state, why.code) == (job.id, JobState.HELD, "held")
    assert "rota release" in why.message
    events = client.events(job.id)
    assert events and all(isinstance(e, rota.Event) for e in events)
    assert events[-1].to_state == "held"
    assert events[0].ts.tzinfo is not None


def test_hold_release_and_cancel(client: rota.Client, unique: Unique) -> None:
    blocker = client.submit(held(unique("blocker")))
    # waits on a job that never runs: it stays pending until we act on it
    job = client.submit(command=["true"], gpus=0, name=unique("dep"), after=[blocker.id])
    assert client.get(job.id).state is JobState.PENDING
    assert client.hold(job.id).state is JobState.HELD
    assert client.release(job.id).state is JobState.PENDING
    cancelled = client.cancel(job.id)
    assert cancelled.state is JobState.CANCELLED and cancelled.done
    with pytest.raises(Conflict, match="already ended"):
        client.cancel(job.id)
    client.cancel(blocker.id)


def test_wait_answers_the_ended_job_with_its_exit_code(client: rota.Client,
                                                       unique: Unique) -> None:
    ok = client.submit(command=[PY, "-c", "pass"], gpus=0.25, name=unique("ok"))
    bad = client.submit(command=["sh", "-c", "exit 3"], gpus=0, name=unique("bad"))
    done = client.wait(ok.id, timeout=60)
    assert (done.state, done.exit_code, done.done) == (JobState.COMPLETED, 0, True)
    assert done.attempts_detail[0].exit_code == 0
    failed = client.wait(bad, timeout=60)
    assert (failed.state, failed.exit_code) == (JobState.FAILED, 3)
    # an ended job answers at once
    assert client.wait(ok.id).id == ok.id


def test_wait_gives_up_after_its_timeout(client: rota.Client, unique: Unique) -> None:
    job = client.submit(command=["sleep", "60"], gpus=0, name=unique("slow"))
    started = time.monotonic()
    with pytest.raises(WaitTimeout) as caught:
        client.wait(job.id, timeout=0.5)
    assert 0.4 < time.monotonic() - started < 10
    assert isinstance(caught.value, TimeoutError) and caught.value.job_id == job.id
    assert f"job {job.id} is still" in str(caught.value)
    assert not client.get(job.id).done  # the job goes on
    client.cancel(job.id)
    assert client.wait(job.id, timeout=30).state is JobState.CANCELLED


def test_requeue_submits_an_ended_job_anew(client: rota.Client, unique: Unique) -> None:
    job = client.submit(command=["sh", "-c", "exit 2"], gpus=0, name=unique("again"))
    client.wait(job.id, timeout=60)
    again = client.requeue(job.id)
    assert again.id != job.id and again.name == job.name
    assert client.wait(again.id, timeout=60).exit_code == 2
    pending = client.submit(held(unique("not-running")))
    with pytest.raises(Conflict, match="only running jobs"):
        client.requeue(pending.id)


# --- logs ----------------------------------------------------------------------------------

def test_logs_of_an_ended_job(client: rota.Client, unique: Unique) -> None:
    job = client.submit(command=printer("alpha", "beta"), gpus=0, name=unique("log"))
    client.wait(job.id, timeout=60)
    text = "".join(client.logs(job.id))
    assert "alpha\n" in text and "beta\n" in text
    chunk = client.read_log(job.id, offset=0, limit=5)
    assert isinstance(chunk, rota.LogChunk)
    assert (chunk.offset, chunk.next, len(chunk.data)) == (0, 5, 5)
    rest = "".join(client.logs(job.id, offset=chunk.next))
    assert chunk.data + rest == text


def test_following_logs_streams_until_the_job_ends(client: rota.Client,
                                                   unique: Unique) -> None:
    job = client.submit(command=printer("first", "second", pause=2.0), gpus=0,
                        name=unique("follow"))
    text, live = "", None
    for chunk in client.logs(job.id, follow=True):  # returns once the job has ended
        text += chunk
        if live is None and "first\n" in text:
            live = not client.get(job.id).done  # it came while the job still ran
    assert live is True
    assert "first\n" in text and "second\n" in text
    assert client.get(job.id).done


# --- the machine ---------------------------------------------------------------------------

def test_gpus_pause_and_resume(client: rota.Client) -> None:
    gpus = client.gpus()
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert all(isinstance(g, rota.Gpu) and g.memory_total >= 24 * 10**9 for g in gpus)
    try:
        assert client.pause_gpu(3).paused is True
        assert [g.paused for g in client.gpus()] == [False, False, False, True]
    finally:
        assert client.resume_gpu(3).paused is False
    with pytest.raises(NotFound, match="no GPU 9"):
        client.pause_gpu(9)


def test_queue_health_and_whoami(client: rota.Client) -> None:
    q = client.queue()
    assert isinstance(q, rota.QueueSummary) and isinstance(q.counts, dict)
    h = client.health()
    assert h.ok and h.version == rota.__version__ and h.gpus == 4
    me = client.whoami()
    assert me.admin is True and me.via == "socket"


def test_force_queues_a_job_this_machine_cannot_run(sdk: Sdk, client: rota.Client,
                                                     unique: Unique) -> None:
    name = unique("huge")
    with pytest.raises(InvalidSpec, match="4 GPUs"):  # the machine has 4
        client.submit(command=["true"], gpus=8, name=name)
    huge = client.submit(command=["true"], gpus=8, name=name, force=True)
    also = client.submit([{"command": ["true"], "gpus": 8, "name": name}], force=True)
    raw = RawClient(sdk.daemon.socket)
    try:
        with pytest.raises(InvalidSpec):
            raw.submit([{"command": ["true"], "gpus": 8, "name": name}])
        [by_raw] = raw.submit([{"command": ["true"], "gpus": 8, "name": name}], force=True)
    finally:
        raw.close()
    try:
        assert huge.state is JobState.PENDING and len(also) == 1
        assert client.why(by_raw["id"]).code == "unsatisfiable"
    finally:
        for jid in (huge.id, also[0].id, by_raw["id"]):
            client.cancel(jid)


def test_queue_pages_in_start_order(client: rota.Client, unique: Unique) -> None:
    name = unique("paged")
    huge = client.submit(command=["true"], gpus=8, name=name, force=True)
    held_jobs = client.submit([held(name) for _ in range(2)])
    try:
        rota_testing.wait_until(lambda: client.why(huge).code == "unsatisfiable")
        page = client.queue(limit=10_000)
        assert isinstance(page, rota.QueuePage) and isinstance(page, rota.QueueSummary)
        assert page.jobs == [*page.running_jobs, *page.waiting_jobs, *page.held_jobs]
        [mine] = [j for j in page.waiting_jobs if j.id == huge.id]
        assert isinstance(mine, rota.Job) and mine.reason and mine.reason.code == "unsatisfiable"
        assert page.waiting_jobs[-1].reason.code == "unsatisfiable"  # never-runnable: last
        assert {j.id for j in held_jobs} <= {j.id for j in page.held_jobs}
        assert page.pending == len(page.waiting_jobs) and page.held >= 2
        assert page.next_offset is None and page.counts["held"] == page.held
        first = client.queue(limit=1, counts=False)
        assert len(first.waiting_jobs) == 1 and first.counts == {}
        assert first.next_offset == (1 if first.pending > 1 else None)
        last = client.queue(limit=1, offset=first.pending - 1)
        assert [j.reason.code for j in last.waiting_jobs] == ["unsatisfiable"]
        totals = client.queue()  # no arguments: the totals alone, as before
        assert totals.waiting_jobs == [] and totals.jobs == [] and totals.counts
    finally:
        for j in (huge, *held_jobs):
            client.cancel(j)


# --- errors --------------------------------------------------------------------------------

def test_a_bad_spec_is_invalid_spec_naming_the_field(client: rota.Client) -> None:
    with pytest.raises(InvalidSpec) as caught:
        client.submit(command=["true"], gpus=1.5)
    assert "more than one GPU must be a whole number" in str(caught.value)
    with pytest.raises(InvalidSpec) as caught:
        client.submit(command=["true"], gpus="lots")
    assert caught.value.field == "gpus"
    with pytest.raises(InvalidSpec) as caught:
        client.submit([{"command": ["true"]}, {"command": ["true"], "nonsense": 1}])
    assert "jobs[1]" in str(caught.value) and caught.value.field == "nonsense"
    with pytest.raises(InvalidSpec, match="state"):
        client.list("sleeping")
    with pytest.raises(TypeError):
        client.submit()


def test_an_unknown_job_is_not_found(client: rota.Client) -> None:
    for call in (client.get, client.why, client.events, client.cancel, client.wait):
        with pytest.raises(NotFound, match="no job 99999999"):
            call(99999999)
    with pytest.raises(NotFound):
        list(client.logs(99999999))
    assert issubclass(NotFound, RotaError)


def test_no_daemon_is_daemon_unavailable_saying_how_to_start_one(tmp_path: Path) -> None:
    with rota.Client(tmp_path / "rota.sock") as c, pytest.raises(DaemonUnavailable) as caught:
        c.health()
    assert "rota server --detach" in str(caught.value)
    with rota.Client(url="http://127.0.0.1:9", timeout=2) as c, \
            pytest.raises(DaemonUnavailable, match=re.escape("127.0.0.1:9")):
        c.health()


def test_the_default_is_the_daemon_of_rota_home(sdk: Sdk, monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setenv("ROTA_HOME", str(sdk.daemon.home))
    with rota.Client() as c:
        assert c.health().ok
        assert c.endpoint.socket_path == sdk.daemon.socket
    monkeypatch.setenv("ROTA_HOME", str(tmp_path))
    with rota.Client() as c, pytest.raises(DaemonUnavailable, match=re.escape(str(tmp_path))):
        c.health()
    with pytest.raises(ValueError, match="not both"):
        rota.Client(tmp_path / "rota.sock", url="http://127.0.0.1:1")


def test_import_rota_stays_cheap() -> None:
    import subprocess

    code = ("import sys, rota; assert rota.__version__; "
            "print(sorted(m for m in ('httpx', 'pydantic', 'rota.client') if m in sys.modules))")
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- ML: metrics, progress, checkpoints, preempt ---------------------------------------------

def test_metrics_progress_and_checkpoints(client: rota.Client, unique: Unique,
                                          tmp_path: Path) -> None:
    lines = [f"step {i}/4: loss={1.0 / i:.2f}" for i in range(1, 5)]
    job = client.submit(command=printer(*lines), gpus=0, name=unique("ml"),
                        checkpoint_dir=str(tmp_path))
    done = client.wait(job.id, timeout=60)
    assert done.command[:2] == printer()[:2]
    assert done.progress is not None and (done.progress.step, done.progress.total_steps) == (4, 4)
    assert done.progress.fraction == 1.0
    m = client.metrics(job.id)
    assert isinstance(m, rota.Metrics) and m.values("loss") == [1.0, 0.5, 0.33, 0.25]
    assert [p[0] for p in m.series["loss"]] == [1, 2, 3, 4]
    assert client.metrics(job.id, after=m.next).series == {}  # nothing new since
    assert client.metrics(job.id, names=["nothing"]).series == {}
    cps = client.checkpoints(job.id)
    assert isinstance(cps, rota.Checkpoints) and cps.checkpoints == [] and cps.resume_from is None
    with pytest.raises(Conflict, match="only running jobs can be preempted"):
        client.preempt(job.id)
