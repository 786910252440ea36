"""The pipeline's S3 calls judge a failure by the storage layer's rules (rota.storage.s3):
what may pass by waiting (a 5xx, throttling, a lost connection) is tried again; a refusal,
a missing bucket or missing credentials fails at once."""

from __future__ import annotations

from typing import Any

import pytest

botocore_exceptions = pytest.importorskip("botocore.exceptions")

from rota.pipeline import data, merge  # noqa: E402


def client_error(code: str, status: int) -> Exception:
    return botocore_exceptions.ClientError(
        {"Error": {"Code": code, "Message": "said so"},
         "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")


@pytest.mark.parametrize(("error", "passing"), [
    (client_error("InternalError", 500), True),
    (client_error("SlowDown", 503), True),
    (botocore_exceptions.EndpointConnectionError(endpoint_url="http://s3.invalid"), True),
    (client_error("AccessDenied", 403), False),
    (client_error("NoSuchBucket", 404), False),
    (botocore_exceptions.NoCredentialsError(), False),
])
def test_s3_failures_are_judged_by_one_set_of_rules(error: Exception, passing: bool,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    err = data.s3_error("upload of s3://b/k", error)
    assert isinstance(err, data.DataUnavailable if passing else data.DataError)
    assert str(err).startswith("upload of s3://b/k: ")

    waits: list[float] = []
    monkeypatch.setattr(merge.time, "sleep", waits.append)
    calls: list[int] = []

    def failing() -> Any:
        calls.append(1)
        raise error

    with pytest.raises(merge.PublishUnavailable if passing else merge.MergeFailed,
                       match="upload of s3://b/k: "):
        merge._retrying("upload of s3://b/k", failing)
    assert len(calls) == (len(merge.RETRY_WAITS_S) + 1 if passing else 1)
    assert waits == (list(merge.RETRY_WAITS_S) if passing else [])
