"""Plain S3 transfers: files and folders as they are, no store manifest (a pipeline's data
chunks, a merged model published as a folder, a model or data set an evaluation fetches).
Each object goes up through boto3's managed transfer (multipart from
``MULTIPART_THRESHOLD``, each part retried alone), so it appears whole or not at all;
errors are Rota's (rota.storage.s3_edge), naming the object.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rota.errors import StorageError
from rota.storage.s3_edge import _boto3, _edge

#: files from this size go up in parts, several at a time (each part retried alone)
MULTIPART_THRESHOLD = 1 << 20
#: the size of an upload's parts (boto3's and the AWS CLI's default: their ETags are told
#: from the bytes alone, rota.storage.sync)
MULTIPART_CHUNK = 8 << 20


def download_prefix(uri: str, dst: Path, *,
                    skipped: Callable[[str], object] = lambda key: None,
                    max_bytes: int | None = None) -> int:
    """Every object under ``s3://bucket/prefix`` into ``dst``, keeping the folders below
    the prefix; the number of files written. A key of another prefix that shares its
    letters (``models/tiny2/...`` for ``models/tiny``) or one climbing out of it goes to
    ``skipped`` instead; folder markers are passed over. boto3 finds the credentials and
    the endpoint as it always does (``AWS_*``, including ``AWS_ENDPOINT_URL_S3``).
    ``max_bytes``: the objects are listed first, and more than that is refused before any
    is downloaded. StorageError (``passing`` for what may change by waiting) or NotFound
    otherwise."""
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    root = dst.resolve()
    wanted: list[tuple[str, Path]] = []
    total = 0
    with _edge(uri):
        s3 = _boto3(uri).client("s3")
        for key, size in list_objects(uri, client=s3):
            rel = os.path.basename(key) if key == prefix else os.path.relpath(key, prefix)
            path = (root / rel).resolve()
            if not path.is_relative_to(root) or path == root:
                skipped(key)
                continue
            wanted.append((key, path))
            total += size
            if max_bytes is not None and total > max_bytes:
                raise StorageError(f"{uri}: holds more than {max_bytes} bytes, the most "
                                   "allowed here")
        for key, path in wanted:
            path.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, key, str(path))
    return len(wanted)


def list_objects(uri: str, *, client: Any = None, what: str | None = None,
                 ) -> list[tuple[str, int]]:
    """(key, size) of every object whose key starts with ``s3://bucket/PREFIX``'s PREFIX
    as written (``data/`` is a folder, ``data`` also matches ``data2/...``); folder
    markers are passed over. Errors as :func:`translate_error`'s, naming ``what`` (else
    the URI)."""
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    with _edge(what or uri):
        s3 = client if client is not None else _boto3(uri).client("s3")
        return [(o["Key"], int(o.get("Size") or 0))
                for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                         Prefix=prefix)
                for o in page.get("Contents", []) if not o["Key"].endswith("/")]


def read_object(uri: str, *, client: Any = None, what: str | None = None) -> bytes:
    """The bytes of the object ``s3://bucket/key``; errors as :func:`list_objects`'."""
    bucket, key = split_uri(uri)
    with _edge(what or uri):
        s3 = client if client is not None else _boto3(uri).client("s3")
        return bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def make_client(*, endpoint_url: str | None = None, region: str | None = None,
                access_key: str | None = None, secret_key: str | None = None,
                what: str = "S3") -> Any:
    """boto3's S3 client signing with SigV4 (what every S3-compatible server takes). The keys
    given here, else boto3's own chain (``AWS_*``, ``~/.aws``, an instance role)."""
    boto3 = _boto3(what)
    from botocore.config import Config

    keys = {"aws_access_key_id": access_key, "aws_secret_access_key": secret_key} \
        if access_key else {}
    with _edge(f"{what}: S3 client"):
        return boto3.client("s3", endpoint_url=endpoint_url, region_name=region,
                            config=Config(signature_version="s3v4"), **keys)


def transfer_config(multipart_threshold: int = MULTIPART_THRESHOLD) -> Any:
    """boto3's TransferConfig: files from ``multipart_threshold`` bytes go up in parts."""
    from boto3.s3.transfer import TransferConfig

    return TransferConfig(multipart_threshold=multipart_threshold,
                          multipart_chunksize=MULTIPART_CHUNK)


def split_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/key`` as (bucket, key); the key without its outer slashes, maybe ''."""
    if not uri.startswith("s3://"):
        raise StorageError(f"{uri}: not an s3://bucket/key address")
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    if not bucket:
        raise StorageError(f"{uri}: no bucket in the address")
    return bucket, key.strip("/")


def upload_file(local: Path, uri: str, *, client: Any = None, config: Any = None,
                content_type: str | None = None) -> None:
    """One local file as the object ``s3://bucket/key``. StorageError (``passing`` when it
    may change by waiting) naming ``upload of <uri>`` otherwise."""
    bucket, key = split_uri(uri)
    extra = {"ContentType": content_type} if content_type else None
    with _edge(f"upload of {uri}"):
        s3 = client if client is not None else _boto3(uri).client("s3")
        s3.upload_file(str(local), bucket, key, ExtraArgs=extra,
                       Config=config if config is not None else transfer_config())


def upload_bytes(body: bytes, uri: str, *, client: Any = None, config: Any = None,
                 content_type: str | None = None) -> None:
    """``body`` as the object ``s3://bucket/key``; errors as :func:`upload_file`'s."""
    bucket, key = split_uri(uri)
    extra = {"ContentType": content_type} if content_type else None
    with _edge(f"upload of {uri}"):
        s3 = client if client is not None else _boto3(uri).client("s3")
        s3.upload_fileobj(io.BytesIO(body), bucket, key, ExtraArgs=extra,
                          Config=config if config is not None else transfer_config())


def upload_prefix(folder: Path, uri: str, *, last: dict[str, bytes] | None = None,
                  client: Any = None, config: Any = None,
                  attempt: Callable[[str, Callable[[], None]], object] | None = None,
                  ) -> list[str]:
    """Every file under ``folder`` (hidden ones included) as ``s3://bucket/prefix/<its
    path below folder>``, one after another in path order, then each of ``last`` (name
    below the prefix: bytes), e.g. a manifest: a reader that waits for it never sees a
    half-published folder. A file of the folder with one of ``last``'s names is not
    uploaded (``last`` replaces it). ``attempt(what, upload)`` runs each object's upload (a
    caller's retries); it is called plainly without it. The URIs written, in order; what
    :func:`download_prefix` brings back as the same folder."""
    from functools import partial

    folder = Path(folder)
    bucket, prefix = split_uri(uri)
    if not folder.is_dir():
        raise StorageError(f"upload of {folder} to {uri}: no such folder")
    last = dict(last or {})
    run = attempt or (lambda what, call: call())
    with _edge(uri):
        s3 = client if client is not None else _boto3(uri).client("s3")
    cfg = config if config is not None else transfer_config()

    def to(rel: str) -> str:
        return f"s3://{bucket}/{prefix}/{rel}" if prefix else f"s3://{bucket}/{rel}"

    written: list[str] = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if rel in last:
            continue
        dest = to(rel)
        run(f"upload of {dest}", partial(upload_file, path, dest, client=s3, config=cfg))
        written.append(dest)
    for rel, body in last.items():
        dest = to(rel.strip("/"))
        run(f"upload of {dest}", partial(upload_bytes, body, dest, client=s3, config=cfg))
        written.append(dest)
    return written


def presigned_get(uri: str, expires_s: float, *, client: Any = None) -> str:
    """A presigned GET URL of the object ``s3://bucket/key``, good for ``expires_s``
    seconds (a credential: never print it). Errors name ``a URL for <uri>``."""
    bucket, key = split_uri(uri)
    with _edge(f"a URL for {uri}"):
        s3 = client if client is not None else _boto3(uri).client("s3")
        url: str = s3.generate_presigned_url("get_object",
                                             Params={"Bucket": bucket, "Key": key},
                                             ExpiresIn=max(1, int(expires_s)))
    return url
