"""The store: every read and write of durable state. Only the daemon writes through it.

One ``Store``, made of a repository per aggregate (``jobs``, ``job_outputs``, ``accounts``,
``schedules``, ``storage_records``, ``usage``), all writing in one unit of work
(``rota.store.base.StoreBase``): a transaction that spans two of them commits once."""

from __future__ import annotations

from rota.store.accounts import AccountsRepo
from rota.store.base import (
    SHARE_KINDS,
    AlertRecord,
    ArtifactRecord,
    AttemptRecord,
    DatasetRecord,
    EventRecord,
    JobRecord,
    LaunchInfo,
    MetricRecord,
    PipelineRecord,
    Queued,
    RoundRecord,
    ScheduleRecord,
    ShareLinkRecord,
)
from rota.store.job_outputs import JobOutputsRepo
from rota.store.jobs import JobsRepo
from rota.store.schedules import SchedulesRepo
from rota.store.storage_records import StorageRepo
from rota.store.usage import UsageRepo

__all__ = [
    "SHARE_KINDS",
    "AlertRecord",
    "ArtifactRecord",
    "AttemptRecord",
    "DatasetRecord",
    "EventRecord",
    "JobRecord",
    "LaunchInfo",
    "MetricRecord",
    "PipelineRecord",
    "Queued",
    "RoundRecord",
    "ScheduleRecord",
    "ShareLinkRecord",
    "Store",
]


class Store(JobsRepo, JobOutputsRepo, AccountsRepo, SchedulesRepo, StorageRepo, UsageRepo):
    """Jobs, attempts and events through SQLAlchemy Core; users, tokens and settings
    (cold paths) through ORM sessions.

    Job reads and writes are on the daemon"s hot paths (several writes per job, reads per
    API request), where the ORM"s objects cost far more than SQLite does, so they are plain
    statements; writes join the ambient ``transaction()`` when the daemon opens one, so
    that a batch of exits or of starts is one commit rather than several per job.

    Inside such a batch, job and attempt updates and events are held and written at its
    end with one ``executemany`` per statement shape: a statement"s overhead in SQLAlchemy
    is several times SQLite"s own, so this is what a batch of N jobs saves, not the commit.
    Held updates are written before any read in the batch (reads see them) and before a
    second update of the same row (rows change in call order).
    """
