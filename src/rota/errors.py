"""Rota's one exception tree. Errors of libraries below are translated at the edge."""

from __future__ import annotations


class RotaError(Exception):
    """Base of every error Rota raises on purpose."""

    #: HTTP status the API answers with when this error escapes a request.
    http_status: int = 500


class InvalidSpec(RotaError):
    """A job spec, a jobs-file line or a CLI value is wrong; the message names what."""

    http_status = 422

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class RequestTooLarge(InvalidSpec):
    """A request body over the daemon's ``max_request_bytes``; the message names the limit
    and the setting that raises it."""

    http_status = 413


class Unauthorized(RotaError):
    """No credentials, or credentials that are not valid (unknown or revoked token)."""

    http_status = 401


class Forbidden(RotaError):
    """Valid credentials, but this user may not do that (another user's job, admin only)."""

    http_status = 403


class NotFound(RotaError):
    http_status = 404


class Conflict(RotaError):
    """The request is valid but the current state forbids it (e.g. cancel a finished job)."""

    http_status = 409


class Gone(RotaError):
    """What the request names existed but is no more to be had: a link that expired or was
    revoked."""

    http_status = 410


class IllegalTransition(Conflict):
    """A job state change that the lifecycle table does not allow."""

    def __init__(self, job_id: int | None, src: str, dst: str) -> None:
        super().__init__(f"job {job_id}: cannot go from {src} to {dst}")
        self.job_id, self.src, self.dst = job_id, src, dst


class DaemonUnavailable(RotaError):
    """The CLI or SDK cannot reach the daemon."""

    http_status = 503
    #: the request was sent and then the connection broke or no answer came in time:
    #: what it asked may or may not have been done (a refused connection: nothing was)
    maybe_done = False


class WaitTimeout(RotaError, TimeoutError):
    """``wait(job_id, timeout=...)`` gave up before the job ended; the job goes on.

    A ``TimeoutError`` too, so ``except TimeoutError`` catches it as it would for asyncio.
    """

    http_status = 504

    def __init__(self, job_id: int, state: str, timeout: float) -> None:
        super().__init__(f"job {job_id} is still {state} after {timeout:g}s")
        self.job_id, self.state, self.timeout = job_id, state, timeout


class BackendError(RotaError):
    """A backend could not launch, signal or inspect a job."""


class DeviceError(RotaError):
    """GPU discovery or monitoring failed."""


class StoreError(RotaError):
    """The database could not be reached or migrated."""

    http_status = 503  # nothing was stored: the request may be sent again


class StorageError(RotaError):
    """A storage backend (a local root, an S3 bucket) refused or failed; the message names
    the object and the cause. ``passing``: the same call may pass later (no connection, a
    timeout, a 5xx, throttling); a refusal, a missing bucket or a corrupt object does not.
    ``code``: the server's own error code, when it gave one (S3's NoSuchBucket, ...)."""

    http_status = 502

    def __init__(self, message: str, *, passing: bool = False, code: str | None = None) -> None:
        super().__init__(message)
        self.passing = passing
        self.code = code


class TrackerError(RotaError):
    """An experiment tracker (MLflow, Weights & Biases) refused or could not be reached."""


class RemoteServiceError(RotaError):
    """A remote service (the Gradients API) refused or failed. ``status`` is its HTTP status
    (0: no answer); ``transient``: the same request may pass later (a lost connection, 5xx,
    429), so it is worth trying again; a 4xx is not."""

    http_status = 502

    def __init__(self, message: str, *, status: int = 0, transient: bool = False) -> None:
        super().__init__(message)
        self.status, self.transient = status, transient
