"""The daemon's pending queue: order, the jobs with dependencies, and the jobs that can
never start kept out of the passes until the machine changes."""

from __future__ import annotations

from rota.core.snapshot import PendingJob
from rota.server.jobs.queue import PendingQueue

G80 = 80 << 30


def job(i: int, *, prio: int = 0, gpus: int = 1000, mem: int | None = None,
        after: tuple[int, ...] = ()) -> PendingJob:
    return PendingJob(id=i, priority=prio, seq=i, gpus_milli=gpus, gpu_mem=mem, after=after)


def ids(q: PendingQueue) -> list[int]:
    return [j.id for j in q.ordered()]


def test_queue_order_and_removal() -> None:
    q = PendingQueue()
    q.load([job(2, prio=0), job(5, prio=0), job(1, prio=3)])
    q.add(job(4, prio=1))
    q.add(job(3, prio=-1))
    assert ids(q) == [3, 2, 5, 4, 1]
    assert q.remove(5) is not None and q.remove(5) is None
    assert ids(q) == [3, 2, 4, 1] and len(q) == 4 and 5 not in q


def test_only_jobs_with_dependencies_are_listed_for_the_snapshot() -> None:
    q = PendingQueue()
    q.load([job(1), job(2, after=(1,)), job(3)])
    q.add(job(4, after=(2, 3)))
    assert sorted(j.id for j in q.with_dependencies()) == [2, 4]
    q.remove(2)
    assert [j.id for j in q.with_dependencies()] == [4]


def test_never_runnable_jobs_wait_apart_until_the_machine_can_hold_them() -> None:
    q = PendingQueue()
    q.load([job(1), job(2, gpus=4000), job(3, mem=100 << 30), job(4, gpus=4000, after=(1,))])
    q.fit_to({0: G80, 1: G80})
    # 4 whole GPUs on a 2-GPU machine; 100 GiB on 80 GiB GPUs: set aside, with the words
    # intake uses; a job with dependencies stays (a failed dependency must still end it)
    assert ids(q) == [1, 4] and len(q) == 4 and 2 in q
    assert [j.id for j in q.aside()] == [2, 3]
    assert "only 2 GPUs exist" in (q.never_reason(2) or "")
    assert "largest" in (q.never_reason(3) or "") and q.never_reason(1) is None
    q.add(job(5, gpus=3000))
    q.add(job(6, prio=-1))
    assert ids(q) == [6, 1, 4] and [j.id for j in q.aside()] == [2, 3, 5]
    q.fit_to({i: 141 << 30 for i in range(4)})  # bigger GPUs: they come back, in order
    assert ids(q) == [6, 1, 2, 3, 4, 5] and [j.id for j in q.aside()] == []
    q.fit_to({0: G80})
    assert ids(q) == [6, 1, 4] and [j.id for j in q.aside()] == [2, 3, 5]
    assert q.remove(3) is not None and q.never_reason(3) is None
    assert [j.id for j in q.aside()] == [2, 5]


def test_no_gpus_sets_aside_gpu_jobs_only() -> None:
    q = PendingQueue()
    q.fit_to({})
    q.add(job(1, gpus=0))
    q.add(job(2, gpus=500))
    assert ids(q) == [1] and "no GPUs" in (q.never_reason(2) or "")


def test_the_least_share_asked_follows_the_jobs_a_pass_looks_at() -> None:
    q = PendingQueue()
    assert q.smallest_milli() == 0
    q.load([job(1, gpus=2000), job(2, gpus=500)])
    assert q.smallest_milli() == 500
    q.add(job(3, gpus=250))
    assert q.smallest_milli() == 250
    q.remove(3)
    q.remove(2)
    assert q.smallest_milli() == 2000
    q.fit_to({0: G80})  # the 2-GPU job is set aside: nothing left for a pass
    assert q.smallest_milli() == 0
    q.fit_to({0: G80, 1: G80})
    assert q.smallest_milli() == 2000


def test_pages_merge_with_jobs_added_between_them() -> None:
    """A restart's pages (each in queue order, each after the one before) among jobs that
    joined one by one meanwhile, some of which a later page brings again."""
    q = PendingQueue()
    q.fit_to({0: G80, 1: G80})
    q.add(job(100, prio=5))  # submitted while the queue was being read: behind every page
    q.add(job(7, prio=1))  # released meanwhile: in the middle of a page still to come
    q.extend([job(3, prio=0), job(9, prio=0), job(2, prio=1), job(4, prio=1)])
    assert ids(q) == [3, 9, 2, 4, 7, 100]
    q.extend([job(6, prio=1), job(7, prio=1, gpus=500), job(8, prio=1, gpus=4000),
              job(1, prio=2, after=(3,)), job(5, prio=2, mem=100 << 30)])
    assert ids(q) == [3, 9, 2, 4, 6, 7, 1, 100]
    assert q.get(7) is not None and q.get(7).gpus_milli == 1000  # the one added meanwhile
    assert [j.id for j in q.aside()] == [8, 5]  # can never start here: apart, in order
    assert [j.id for j in q.with_dependencies()] == [1]
    assert q.smallest_milli() == 1000 and len(q) == 10
    q.remove(6)
    assert ids(q) == [3, 9, 2, 4, 7, 1, 100]


def test_pages_end_as_one_load_would() -> None:
    import random

    rng = random.Random(7)
    for _ in range(50):
        jobs = [job(i, prio=rng.randrange(4), gpus=rng.choice([500, 1000, 4000]))
                for i in range(1, 200)]
        ordered = sorted(jobs, key=lambda j: (j.priority, j.id))
        live = rng.sample(jobs, 20)  # added one by one, between pages
        q = PendingQueue()
        q.fit_to({0: G80, 1: G80})
        for k in range(0, len(ordered), 25):
            q.add(live[k // 10])
            q.extend(ordered[k:k + 25])
        whole = PendingQueue()
        whole.fit_to({0: G80, 1: G80})
        whole.load(ordered)
        assert ids(q) == ids(whole)
        assert [j.id for j in q.aside()] == [j.id for j in whole.aside()]
        assert len(q) == len(whole) == 199
