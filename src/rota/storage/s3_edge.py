"""The edge between boto3 and Rota: boto3 imported on first use (``pip install 'rota[s3]'``),
and botocore's (and s3transfer's) errors turned into Rota's, by one set of rules for every S3
caller (the store, the plain transfers, a workspace's sync, the pipelines and evaluations):
NotFound for a missing object, else StorageError, ``passing`` when waiting may mend it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rota.errors import NotFound, RotaError, StorageError

#: S3's error codes for a server's passing trouble (the rules of rota.eval.fetch)
_PASSING = frozenset({"SlowDown", "Throttling", "ThrottlingException", "InternalError",
                      "ServiceUnavailable", "RequestTimeout"})
_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})


def _boto3(what: str) -> Any:
    try:
        import boto3
    except ImportError:
        raise StorageError(f"{what} needs boto3: pip install 'rota[s3]'") from None
    return boto3


@contextmanager
def _edge(what: str) -> Iterator[None]:
    """botocore's errors (and s3transfer's) as StorageError or NotFound naming ``what``."""
    try:
        yield
    except RotaError:
        raise
    except Exception as e:
        raise translate_error(e, what) from e


def translate_error(e: BaseException, what: str) -> RotaError:
    """boto3's (botocore's, s3transfer's) error as Rota's, naming ``what``: NotFound for a
    missing object, else StorageError, ``passing`` when it may change by waiting (the
    network, a 5xx, throttling). The one set of rules for every S3 caller."""
    from botocore import exceptions as boto

    if type(e).__name__ == "S3UploadFailedError" and isinstance(e.__context__, Exception):
        e = e.__context__  # boto3 wraps the ClientError of an upload
    if isinstance(e, RotaError):
        return e
    if isinstance(e, boto.ClientError):
        error = e.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if code in _MISSING:
            return NotFound(f"{what}: no such object")
        message = error.get("Message") or ""
        return StorageError(f"{what}: {code or status}: {message}".rstrip(": "),
                            passing=code in _PASSING or status >= 500, code=code or None)
    if isinstance(e, boto.NoCredentialsError | boto.PartialCredentialsError):
        return StorageError(f"{what}: no S3 credentials: set AWS_ACCESS_KEY_ID and "
                            "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE")
    passing = isinstance(e, boto.ConnectionError | boto.HTTPClientError
                         | boto.IncompleteReadError | ConnectionError | TimeoutError)
    first = (str(e).strip().splitlines() or [""])[0][:300]
    return StorageError(f"{what}: {type(e).__name__}: {first}", passing=passing)
