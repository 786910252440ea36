"""A client of the test S3 server (tests/pipeline/conftest.py's ``s3_url``)."""

from __future__ import annotations

from typing import Any


def s3_client(url: str) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id="k", aws_secret_access_key="s")
