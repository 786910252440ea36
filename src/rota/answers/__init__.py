"""The daemon's JSON answers as they come over the wire, described as TypedDicts: the one
definition of each answer, read by both sides.

The daemon documents each route's answer from these (rota.server.api.answer_schemas puts
their JSON schemas in /openapi.json, without validating any answer at run time), and
:class:`rota.client.RawClient` (the client the CLI uses) returns them: plain dicts at run
time, so they cost nothing to build or import, yet mypy checks every key the CLI reads.
The SDK's :class:`rota.Client` turns the same answers into pydantic models
(rota.client.models), with datetimes; here times stay epoch seconds, as sent.

One module per resource (``jobs``, ``machine``, ``access``, ``alerts``, ``pools``,
``evaluations``, ``fair_share``, ``pipelines``), every answer importable from here.
A leaf every layer may import: only ``typing`` is imported, and the CLI imports this
module under ``TYPE_CHECKING`` only. The annotations are evaluated (no ``from __future__
import annotations``), so each class's ``__required_keys__`` is right at run time for
tools that read it. tests/sdk/test_answer_types.py holds these types to the daemon's
OpenAPI document and to its real answers, so a field added or renamed on the server fails
until they follow.
"""

from rota.answers.access import (
    NewTokenAnswer,
    SecretAnswer,
    SecretDeletedAnswer,
    SecretsAnswer,
    SecretSetAnswer,
    TokenAnswer,
    TokensAnswer,
    UserAnswer,
    UserRemovedAnswer,
    UsersAnswer,
    WhoAmIAnswer,
)
from rota.answers.alerts import (
    AlertAnswer,
    AlertsAnswer,
)
from rota.answers.evaluations import (
    EvalResultsAnswer,
    EvalRunAnswer,
    EvalScheduleAnswer,
    EvalSchedulesAnswer,
    EvalUnscheduledAnswer,
)
from rota.answers.fair_share import (
    FactorAnswer as FactorAnswer,
)
from rota.answers.fair_share import (
    PriorityAnswer as PriorityAnswer,
)
from rota.answers.fair_share import (
    ReportAnswer,
    ReportRowAnswer,
    ReportTotalAnswer,
    TierAnswer,
    TiersAnswer,
)
from rota.answers.fair_share import (
    ShareAnswer as ShareAnswer,
)
from rota.answers.fair_share import (
    SharesAnswer as SharesAnswer,
)
from rota.answers.jobs import (
    ArtifactFileAnswer as ArtifactFileAnswer,
)
from rota.answers.jobs import (
    ArtifactsAnswer as ArtifactsAnswer,
)
from rota.answers.jobs import (
    AttachAnswer,
    AttemptAnswer,
    CardAnswer,
    CardDatasetAnswer,
    CardGitAnswer,
    CardMetricAnswer,
    CardOutputAnswer,
    CheckpointAnswer,
    CheckpointsAnswer,
    EngineJobAnswer,
    EventAnswer,
    EventsAnswer,
    JobAnswer,
    JobDetailAnswer,
    JobListAnswer,
    JobStateAnswer,
    JobStateName,
    LogAnswer,
    MetricPoint,
    MetricsAnswer,
    MetricsPageAnswer,
    MlflowRun,
    ProgressAnswer,
    ReasonAnswer,
    ReportedCheckpoint,
    RequeueAnswer,
    SessionAnswer,
    SessionsAnswer,
    SpecAnswer,
    SubmitAnswer,
    TrackingAnswer,
    WaitAnswer,
    WandbRun,
    WhyAnswer,
)
from rota.answers.jobs import (
    CleanupDoneAnswer as CleanupDoneAnswer,
)
from rota.answers.jobs import (
    CleanupPlanAnswer as CleanupPlanAnswer,
)
from rota.answers.jobs import (
    IdleAnswer as IdleAnswer,
)
from rota.answers.jobs import (
    ShareLinkAnswer as ShareLinkAnswer,
)
from rota.answers.jobs import (
    ShareLinksAnswer as ShareLinksAnswer,
)
from rota.answers.jobs import (
    StaleFileAnswer as StaleFileAnswer,
)
from rota.answers.jobs import (
    WorkspaceAnswer as WorkspaceAnswer,
)
from rota.answers.jobs import (
    WorkspacesAnswer as WorkspacesAnswer,
)
from rota.answers.jobs import (
    WorkspaceSyncAnswer as WorkspaceSyncAnswer,
)
from rota.answers.machine import (
    DrainAnswer,
    GpuAnswer,
    GpuHours,
    GpuPausedAnswer,
    GpusAnswer,
    HealthAnswer,
    JobsFileAnswer,
    JobsFileError,
    JobsFileRan,
    QueueAnswer,
    Reservation,
    ShutdownAnswer,
    SimulateAnswer,
    StatsAnswer,
    SummaryAnswer,
)
from rota.answers.machine import (
    QuotaAnswer as QuotaAnswer,
)
from rota.answers.machine import (
    QuotaChangedAnswer as QuotaChangedAnswer,
)
from rota.answers.machine import (
    QuotasAnswer as QuotasAnswer,
)
from rota.answers.pipelines import (
    DatasetAddAnswer as DatasetAddAnswer,
)
from rota.answers.pipelines import (
    DatasetAnswer as DatasetAnswer,
)
from rota.answers.pipelines import (
    DatasetCacheAnswer as DatasetCacheAnswer,
)
from rota.answers.pipelines import (
    DatasetCacheVersionAnswer as DatasetCacheVersionAnswer,
)
from rota.answers.pipelines import (
    DatasetChunkAnswer as DatasetChunkAnswer,
)
from rota.answers.pipelines import (
    DatasetFileAnswer as DatasetFileAnswer,
)
from rota.answers.pipelines import (
    DatasetFilesAnswer as DatasetFilesAnswer,
)
from rota.answers.pipelines import (
    DatasetJobAnswer as DatasetJobAnswer,
)
from rota.answers.pipelines import (
    DatasetsAnswer as DatasetsAnswer,
)
from rota.answers.pipelines import (
    DatasetShowAnswer as DatasetShowAnswer,
)
from rota.answers.pipelines import (
    DatasetsRemovedAnswer as DatasetsRemovedAnswer,
)
from rota.answers.pipelines import (
    DatasetUploadAnswer as DatasetUploadAnswer,
)
from rota.answers.pipelines import (
    DatasetVersionAnswer as DatasetVersionAnswer,
)
from rota.answers.pipelines import (
    GradientsWinnerAnswer,
    PipelineAnswer,
    PipelineDetailAnswer,
    PipelineRemovedAnswer,
    PipelineRoundAnswer,
    PipelinesAnswer,
    RoundFactsAnswer,
)
from rota.answers.pools import (
    ContainersAnswer,
    EngineCapabilitiesAnswer,
    PoolAnswer,
    PoolHealthAnswer,
    PoolsAnswer,
    RenderAnswer,
)

__all__ = [
    "AlertAnswer",
    "AlertsAnswer",
    "AttachAnswer",
    "AttemptAnswer",
    "CardAnswer",
    "CardDatasetAnswer",
    "CardGitAnswer",
    "CardMetricAnswer",
    "CardOutputAnswer",
    "CheckpointAnswer",
    "CheckpointsAnswer",
    "ContainersAnswer",
    "DrainAnswer",
    "EngineCapabilitiesAnswer",
    "EngineJobAnswer",
    "EvalResultsAnswer",
    "EvalRunAnswer",
    "EvalScheduleAnswer",
    "EvalSchedulesAnswer",
    "EvalUnscheduledAnswer",
    "EventAnswer",
    "EventsAnswer",
    "GpuAnswer",
    "GpuHours",
    "GpuPausedAnswer",
    "GpusAnswer",
    "GradientsWinnerAnswer",
    "HealthAnswer",
    "JobAnswer",
    "JobDetailAnswer",
    "JobListAnswer",
    "JobStateAnswer",
    "JobStateName",
    "JobsFileAnswer",
    "JobsFileError",
    "JobsFileRan",
    "LogAnswer",
    "MetricPoint",
    "MetricsAnswer",
    "MetricsPageAnswer",
    "MlflowRun",
    "NewTokenAnswer",
    "PipelineAnswer",
    "PipelineDetailAnswer",
    "PipelineRemovedAnswer",
    "PipelineRoundAnswer",
    "PipelinesAnswer",
    "PoolAnswer",
    "PoolHealthAnswer",
    "PoolsAnswer",
    "ProgressAnswer",
    "QueueAnswer",
    "ReasonAnswer",
    "RenderAnswer",
    "ReportAnswer",
    "ReportRowAnswer",
    "ReportTotalAnswer",
    "ReportedCheckpoint",
    "RequeueAnswer",
    "Reservation",
    "RoundFactsAnswer",
    "SecretAnswer",
    "SecretDeletedAnswer",
    "SecretSetAnswer",
    "SecretsAnswer",
    "SessionAnswer",
    "SessionsAnswer",
    "ShutdownAnswer",
    "SimulateAnswer",
    "SpecAnswer",
    "StatsAnswer",
    "SubmitAnswer",
    "SummaryAnswer",
    "TierAnswer",
    "TiersAnswer",
    "TokenAnswer",
    "TokensAnswer",
    "TrackingAnswer",
    "UserAnswer",
    "UserRemovedAnswer",
    "UsersAnswer",
    "WaitAnswer",
    "WandbRun",
    "WhoAmIAnswer",
    "WhyAnswer",
]
