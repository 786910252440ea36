"""The answers about pipelines and datasets (see rota.answers)."""

from typing import Literal, NotRequired, TypedDict


class GradientsWinnerAnswer(TypedDict):
    """The Gradients entry whose adapter a round merged (lowest test loss with a repo)."""

    hotkey: str | None
    repo: str
    test_loss: float | None
    synth_loss: float | None
    quality_score: float | None


class RoundFactsAnswer(TypedDict):
    """What a round's steps reported (each key once its step has run)."""

    rows: NotRequired[int | None]  # examples after mapping and merging
    train_rows: NotRequired[int | None]  # of them, before the held-out tail
    heldout_rows: NotRequired[int | None]
    chunk_rows: NotRequired[int | None]  # trained on this round
    published: NotRequired[str | None]  # where the merged model was kept besides its folder
    merged_bytes: NotRequired[int | None]
    task_id: NotRequired[str | None]  # the Gradients task
    winner: NotRequired[GradientsWinnerAnswer | None]


class PipelineRoundAnswer(TypedDict):
    """One round of a pipeline: its steps' jobs and the lineage it made."""

    number: int
    state: Literal["running", "accepted", "rejected", "failed"]
    step: str  # prep | train | merge | evaluate | done
    reason: str | None  # why it ended so (the verdict with both numbers, or what failed)
    jobs: dict[str, int]  # step -> job id (evaluate_base: the base's evaluation)
    job_states: dict[str, str]  # step -> that job's state now
    folder: str
    data_hash: str  # the prepared data's (a new hash: a new held-out set)
    chunk: int | None  # the data chunk trained on (0-based) of `chunks`
    chunks: int | None
    base_model: str  # trained from
    adapter: str | None  # what training made
    merged_model: str | None  # what the merge made (the next base, if accepted)
    remote_task: str | None  # the Gradients task id
    metric: float | None  # the merged model's held-out metric
    base_metric: float | None  # the base's, on the same data
    facts: RoundFactsAnswer
    due_at: float
    started_at: float
    ended_at: float | None


class PipelineAnswer(TypedDict):
    """A pipeline as `rota pipeline list/show` shows it."""

    id: int
    name: str
    user: str
    format: Literal["rota", "gradients"]  # the file's form
    config_path: str
    train: Literal["local", "gradients"]  # where rounds train
    metric: str  # what the evaluation compares
    paused: bool
    paused_reason: str | None
    state: str  # running (a round is open), waiting, paused
    why: str  # when the next round runs and why, or what the open round does
    next_at: float | None
    base_model: str  # what the next round trains from
    base_round: int | None  # the round that made it (None: the config's model_repo)
    base_metric: float | None
    rounds: int  # begun
    failures: int  # failed in a row
    created_at: float


class PipelinesAnswer(TypedDict):
    pipelines: list[PipelineAnswer]  # oldest first: the caller's (an admin: everyone's)


class PipelineDetailAnswer(TypedDict):
    pipeline: PipelineAnswer
    rounds: list[PipelineRoundAnswer]  # newest first


class PipelineRemovedAnswer(TypedDict):
    name: str
    removed: bool
    cancelled_round: int | None  # the open round whose jobs were cancelled


class DatasetVersionAnswer(TypedDict):
    """One version of a registered dataset (rota dataset add)."""

    ref: str  # OWNER/NAME:vN, as jobs name it once resolved
    owner: str
    name: str
    version: int
    digest: str  # the manifest's content hash: the same content is the same version
    shared: bool  # every user may read it (else its owner and admins)
    files: int
    bytes: int
    source: str  # the folder it was uploaded from, or s3://...
    description: str | None
    created_by: str
    created_at: float
    store: str  # no credentials
    key: str  # in the store


class DatasetAnswer(DatasetVersionAnswer):
    """A dataset as listed: its latest version, and every version's number."""

    versions: list[int]
    cached: bool  # the latest version is in this machine's cache


class DatasetsAnswer(TypedDict):
    datasets: list[DatasetAnswer]


class DatasetFileAnswer(TypedDict):
    path: str
    size: int
    sha256: str


class DatasetJobAnswer(TypedDict):
    id: int
    state: str


class DatasetShowAnswer(DatasetAnswer):
    """GET /v1/datasets/{name}: one version with its files and the jobs that read it."""

    contents: list[DatasetFileAnswer]
    jobs: list[DatasetJobAnswer]  # the last 50
    in_store: bool  # its files are in the store (False: they went missing)


class DatasetUploadAnswer(TypedDict):
    id: str
    name: str
    files: int
    bytes: int
    received: int
    chunk_bytes: int  # the most one PUT of a chunk may carry
    # path -> bytes it has of that file: an upload of the same content cut off earlier
    # goes on from there
    received_files: dict[str, int]


class DatasetAddAnswer(TypedDict):
    """An upload begun (``upload``), or the version that holds the content (``version``:
    made now, or there already when ``made`` is false)."""

    upload: DatasetUploadAnswer | None
    version: DatasetVersionAnswer | None
    made: bool


class DatasetChunkAnswer(TypedDict):
    path: str
    received: int  # the file's bytes received so far


class DatasetFilesAnswer(TypedDict):
    received: dict[str, int]  # path -> the file's bytes received so far


class DatasetsRemovedAnswer(TypedDict):
    removed: list[DatasetVersionAnswer]


class DatasetCacheVersionAnswer(TypedDict):
    digest: str
    bytes: int
    used_at: float
    refs: list[str]


class DatasetCacheAnswer(TypedDict):
    """GET /v1/dataset-cache (admins): this machine's cache of dataset versions."""

    path: str
    limit: int | None
    bytes: int
    versions: list[DatasetCacheVersionAnswer]
    fetching: list[str]  # digests
    trouble: dict[str, str]  # digest -> why its last fetch failed
