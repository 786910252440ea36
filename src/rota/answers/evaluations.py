"""The answers about evaluations and their schedules (see rota.answers)."""

from typing import Literal, TypedDict

from rota.answers.jobs import JobStateName


class EvalRunAnswer(TypedDict):
    """One evaluation run (a job tagged ``eval``), as `rota eval results` lists it."""

    id: int  # the job's
    name: str  # the config's name
    model: str | None  # the model as the config names it
    harness: str | None
    git_commit: str | None  # the config file's, when it was in a repository
    state: JobStateName
    pool: str | None
    created_at: float
    ended_at: float | None
    metrics: dict[str, float]  # the last value of each metric its latest attempt reported


class EvalResultsAnswer(TypedDict):
    runs: list[EvalRunAnswer]  # newest first


class EvalScheduleAnswer(TypedDict):
    """An evaluation that runs by itself (`rota eval schedule`)."""

    id: int
    user: str
    name: str  # the config's
    config_path: str  # the file it was read from when scheduled
    git_commit: str | None  # that file's, when it was in a repository
    pool: str | None  # None: the config's compute.pool, else the default pool
    trigger: Literal["every", "after_job", "checkpoint"]
    every_s: float | None  # every: the seconds between runs
    next_at: float | None  # every: when the next run is due
    job_id: int | None  # after_job, checkpoint: the job watched
    evaluated: list[str]  # checkpoint: the checkpoints evaluated so far
    runs: int  # evaluations submitted
    last_job: int | None  # the last evaluation's job
    enabled: bool
    disabled_reason: str | None  # why it no longer runs (done, refused, the job failed)
    created_at: float


class EvalSchedulesAnswer(TypedDict):
    schedules: list[EvalScheduleAnswer]  # oldest first: the caller's (an admin: everyone's)


class EvalUnscheduledAnswer(TypedDict):
    id: int
    removed: bool
