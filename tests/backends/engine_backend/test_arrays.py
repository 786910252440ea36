"""A sweep's first attempts as one engine array, through EngineBackend over an in-memory
engine that takes arrays: what forms a group and what splits one, the records written
before the one submit, and a daemon killed between that submit and the records' ids."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rota.backends.base import Launched, LaunchFailed, LaunchRequest, TakenBack
from rota.backends.engine import EngineCapabilities, EngineJob, EngineState, EngineStatus
from rota.backends.engine_backend import exit_info
from rota.backends.engine_record import state_path

from .fake import FakeEngine, request
from .test_adapter import Cluster


@dataclass
class ArrayFake(FakeEngine):
    """The fake cluster, taking arrays: an array is one submit, its tasks ``<id>_<i>``."""

    capabilities: EngineCapabilities = dataclasses.field(
        default_factory=lambda: EngineCapabilities(arrays=True))
    arrays: dict[str, list[EngineJob]] = dataclasses.field(default_factory=dict)

    def submit_array(self, jobs: list[EngineJob], key: str) -> list[str]:
        self.calls.append(("submit_array", (key, [j.key for j in jobs])))
        self._maybe_down("submit")
        array = str(next(self._ids))
        self.arrays[key] = jobs
        ids = [f"{array}_{i}" for i in range(len(jobs))]
        for eid, job in zip(ids, jobs, strict=True):
            self.seen_env[eid] = {v: self.secrets(n) for v, n in job.secret_env.items()}
            self.jobs[eid] = job
            self.states[eid] = EngineStatus(eid, EngineState.QUEUED, reason="Priority")
        if self.after_submit is not None:
            self.after_submit(array)
        return ids

    def find_array(self, key: str, count: int) -> list[str] | None:
        self.calls.append(("find_array", key))
        if key not in self.arrays:
            return None
        array = min(eid.split("_")[0] for eid, j in self.jobs.items()
                    if j in self.arrays[key] and "_" in eid)
        return [f"{array}_{i}" for i in range(count)]


def point(c: Cluster, job_id: int, attempt: int = 1, *, argv: tuple[str, ...] | None = None,
          env: dict[str, str] | None = None, **job: Any) -> LaunchRequest:
    """A sweep's point: its own command and Rota's own integers, the rest shared."""
    env = {"ROTA_JOB_ID": str(job_id), "ROTA_ATTEMPT": str(attempt), "LR": "0.1",
           **(env or {})}
    ej = EngineJob(job_id=job_id, attempt=attempt, name=f"sweep-{job_id}",
                   argv=argv or ("echo", f"x={job_id}"), env=env, **job)
    return request(c.home, ej, env)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, ArrayFake)
    yield c
    for a in c.adapters:
        a.close()


def submits(fake: FakeEngine) -> list[tuple[str, object]]:
    return [(op, arg) for op, arg in fake.calls if op in ("submit", "submit_array")]


def record(req: LaunchRequest) -> dict[str, Any]:
    return dict(json.loads(state_path(req.status_path).read_text()))


def test_a_sweeps_first_attempts_go_as_one_array_each_following_its_task(
        cluster: Cluster) -> None:
    a = cluster.adapter()
    reqs = [point(cluster, i) for i in (1, 2, 3)]
    got = a.launch_many(reqs)
    assert submits(cluster.fake) == [
        ("submit_array", ("rota-1-1-array", ["rota-1-1", "rota-2-1", "rota-3-1"]))]
    assert [o.handle.extra["engine_id"] for o in got if isinstance(o, Launched)] == \
        ["100_0", "100_1", "100_2"]
    for index, req in enumerate(reqs):
        assert record(req) | {"log_size": 0} == {
            "key": f"rota-{req.job_id}-1", "engine_id": f"100_{index}", "grace": 30.0,
            "log_path": str(req.log_path), "offset": 0, "log_size": 0,
            "array": "rota-1-1-array", "index": index, "size": 3}
        assert req.log_path.read_text() == f"=== rota: job {req.job_id} attempt 1\n"
    cluster.fake.run("100_1", b"x=2\n")
    cluster.fake.end("100_1", code=0)
    a.poll_once()
    assert reqs[1].log_path.read_text().endswith("x=2\n")
    assert a.collect(got[1].handle).exit_code == 0  # type: ignore[union-attr]
    assert a.collect(got[0].handle) is None  # type: ignore[union-attr]


@pytest.mark.parametrize(("change", "why"), [
    ({"attempt": 2}, "a retry goes alone"),
    ({"nodes": 2}, "a multi-node job goes alone"),
    ({"after": ("55",)}, "a job with dependencies goes alone"),
    ({"env": {"LR": "0.2"}}, "a user's value differs"),
    ({"env": {"ROTA_JOB_ID": "x"}}, "Rota's own variable is no integer"),
    ({"gpus": 1.0}, "other resources"),
    ({"cwd": "/elsewhere"}, "another folder"),
    ({"labels": {"user": "bob"}}, "another user"),
    ({"time_limit": 60.0}, "another limit"),
])
def test_what_splits_a_group(cluster: Cluster, change: dict[str, Any], why: str) -> None:
    a = cluster.adapter()
    odd = point(cluster, 3, **change)
    a.launch_many([point(cluster, 1), point(cluster, 2), odd, point(cluster, 4)])
    alone = "rota-3-2" if change.get("attempt") == 2 else "rota-3-1"
    assert submits(cluster.fake) == [
        ("submit_array", ("rota-1-1-array", ["rota-1-1", "rota-2-1", "rota-4-1"])),
        ("submit", alone)], why


def test_secrets_with_other_values_split_a_group_and_equal_ones_reach_every_task(
        cluster: Cluster) -> None:
    a = cluster.adapter()
    same: dict[str, Any] = {"env": {"TOKEN": "t1"}, "secret_env": {"TOKEN": "TOKEN"}}
    other: dict[str, Any] = {"env": {"TOKEN": "t2"}, "secret_env": {"TOKEN": "TOKEN"}}
    a.launch_many([point(cluster, 1, **same), point(cluster, 2, **same),
                   point(cluster, 3, **other)])
    assert submits(cluster.fake) == [
        ("submit_array", ("rota-1-1-array", ["rota-1-1", "rota-2-1"])), ("submit", "rota-3-1")]
    assert cluster.fake.seen_env["100_0"] == cluster.fake.seen_env["100_1"] == {"TOKEN": "t1"}
    assert "t1" not in json.dumps([record(point(cluster, i)) for i in (1, 2)])


def test_an_engine_without_arrays_gets_one_job_per_point(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    a = c.adapter()
    try:
        a.launch_many([point(c, i) for i in (1, 2)])
        assert submits(c.fake) == [("submit", "rota-1-1"), ("submit", "rota-2-1")]
    finally:
        a.close()


def test_a_refused_member_fails_alone_and_the_rest_still_go_as_an_array(
        cluster: Cluster) -> None:
    a = cluster.adapter()
    bad = point(cluster, 2, secret_env={"TOKEN": "TOKEN"})  # no value for it
    got = a.launch_many([point(cluster, 1), bad, point(cluster, 3)])
    assert isinstance(got[1], LaunchFailed) and not got[1].retryable
    assert "no value for the secret variable TOKEN" in got[1].reason
    assert submits(cluster.fake) == [
        ("submit_array", ("rota-1-1-array", ["rota-1-1", "rota-3-1"]))]
    assert [o.handle.extra["engine_id"] for o in (got[0], got[2])  # type: ignore[union-attr]
            ] == ["100_0", "100_1"]


def test_an_unreachable_engine_fails_every_member_for_a_retry(cluster: Cluster) -> None:
    a = cluster.adapter()
    cluster.fake.down = 1
    got = a.launch_many([point(cluster, 1), point(cluster, 2)])
    assert all(isinstance(o, LaunchFailed) and o.retryable for o in got)


def test_a_daemon_killed_between_the_submit_and_the_records_ids_finds_every_task(
        cluster: Cluster) -> None:
    a = cluster.adapter()
    reqs = [point(cluster, i) for i in (1, 2, 3)]
    cluster.fake.after_submit = lambda eid: (_ for _ in ()).throw(KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):  # the daemon dies before recording the answer
        a.launch_many(reqs)
    assert all(record(r)["engine_id"] is None and record(r)["array"] == "rota-1-1-array"
               for r in reqs)
    cluster.fake.after_submit = None
    again = cluster.adapter()
    # recovery: each attempt located by its record (no handle stored) ...
    found = [again.locate(None, str(r.status_path), 0.0).handle for r in reqs[:2]]
    assert [h.extra["engine_id"] for h in found if h] == ["100_0", "100_1"]
    # ... or launched again: it finds its task, alone, and submits nothing
    got = again.launch_many([reqs[2]])
    assert isinstance(got[0], Launched) and got[0].handle.extra["engine_id"] == "100_2"
    assert len(submits(cluster.fake)) == 1
    assert cluster.fake.count("find_array") == 3 and cluster.fake.count("find") == 0
    assert reqs[2].log_path.read_text() == "=== rota: job 3 attempt 1\n"  # the header once


def test_a_member_never_submitted_before_the_kill_is_submitted_alone(
        cluster: Cluster) -> None:
    a = cluster.adapter()
    reqs = [point(cluster, i) for i in (1, 2)]
    cluster.fake.down = 1  # the records are written, the array never reached the engine
    a.launch_many(reqs)
    got = cluster.adapter().launch_many(reqs)  # tried again: records exist, so each alone
    assert [o.handle.extra["engine_id"] for o in got if isinstance(o, Launched)] == \
        ["100", "101"]
    assert cluster.fake.count("find_array") == 2  # asked first: the engine never got it
    assert submits(cluster.fake) == [
        ("submit_array", ("rota-1-1-array", ["rota-1-1", "rota-2-1"])),  # failed: down
        ("submit", "rota-1-1"), ("submit", "rota-2-1")]


def test_a_job_its_engine_took_back_ends_as_taken_back_not_failed() -> None:
    status = EngineStatus("9", EngineState.ENDED, reason="NODE_FAIL", exit_code=None,
                          signal=None, ended_at=5.0, preempted=True)
    got = exit_info(status)
    assert isinstance(got, TakenBack) and got.why == "its engine ended it: NODE_FAIL"
    assert not isinstance(exit_info(dataclasses.replace(status, preempted=False)), TakenBack)
