"""A store in an S3 bucket (AWS, or an S3-compatible server: MinIO, Ceph, R2...).

Layout under the prefix: ``<key>/MANIFEST.json`` and ``<key>/files/<digest>/<path>``, where
``<digest>`` is the manifest's digest. A publish uploads every file first (each object
appears whole or not at all, multipart uploads included), then PUTs the manifest: the
manifest's presence is what makes the key exist. A new version's files go beside the old
ones, so readers of the old manifest keep finding its files until it is replaced.

boto3 is imported on first use (``pip install 'rota[s3]'``); it finds the credentials as it
always does (``AWS_*`` variables, ``~/.aws``, an instance role). botocore's errors become
StorageError (NotFound for a missing object) here, at the edge.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

from rota.errors import NotFound, RotaError, StorageError
from rota.storage._common import (
    FILES_DIR,
    VerifyingReader,
    check_key,
    fetch_into,
    open_staged,
    select,
)
from rota.storage.manifest import CHUNK, MANIFEST_NAME, Manifest, safe_relpath

#: files from this size go up in parts, several at a time (each part retried alone)
MULTIPART_THRESHOLD = 1 << 20
#: the size of an upload's parts (boto3's and the AWS CLI's default: their ETags are told
#: from the bytes alone, rota.storage.sync)
MULTIPART_CHUNK = 8 << 20
#: S3's error codes for a server's passing trouble (the rules of rota.eval.fetch)
_PASSING = frozenset({"SlowDown", "Throttling", "ThrottlingException", "InternalError",
                      "ServiceUnavailable", "RequestTimeout"})
_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})


class S3Store:
    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 region: str | None = None, client: Any = None) -> None:
        self.bucket = bucket
        self.prefix = check_key(prefix.strip("/")) if prefix.strip("/") else ""
        self._base = f"{self.prefix}/" if self.prefix else ""
        self.url = f"s3://{bucket}/{self.prefix}".rstrip("/")
        self._endpoint_url, self._region = endpoint_url, region
        self._client = client
        self._transfer: Any = None

    @property
    def client(self) -> Any:
        """boto3's S3 client, made on first use."""
        if self._client is None:
            boto3 = _boto3(self.url)
            from botocore.config import Config

            with _edge(f"{self.url}: S3 client"):  # SigV4 links: what every server takes
                self._client = boto3.client("s3", endpoint_url=self._endpoint_url,
                                            region_name=self._region,
                                            config=Config(signature_version="s3v4"))
        return self._client

    # -- reading

    def manifest(self, key: str) -> Manifest | None:
        obj = self._obj(check_key(key), MANIFEST_NAME)
        try:
            with _edge(self._name(obj)):
                data = self.client.get_object(Bucket=self.bucket, Key=obj)["Body"].read()
        except NotFound:
            return None
        try:
            return Manifest.from_json(data)
        except StorageError as e:
            raise StorageError(f"{self._name(obj)}: {e}") from None

    def fetch(self, key: str, dest: Path, paths: Sequence[str] | None = None) -> Manifest:
        m = self._published(key)
        where = f"{self.url}: {key}"
        entries = select(m.files, m.find, paths, where)
        version = m.digest()

        @contextmanager
        def open_entry(entry: Any) -> Iterator[BinaryIO]:
            with self._get(key, version, entry.path, where) as body:
                yield body

        with _edge(where):
            fetch_into(Path(dest), entries, open_entry, where)
        return m

    def open(self, key: str, path: str, *, manifest: Manifest | None = None) -> BinaryIO:
        m = manifest or self._published(key)
        entry = m.find(safe_relpath(path))
        if entry is None:
            raise NotFound(f"{self.url}: {key}: no file {path!r} in its manifest")
        return self._get(key, m.digest(), entry.path, f"{self.url}: {key}")

    def keys(self, prefix: str = "") -> list[str]:
        found: list[str] = []
        folders = [self._base]
        with _edge(f"{self.url}: list keys"):
            while folders:  # by '/', never listing a key's files
                folder = folders.pop()
                for page in self._pages(folder, delimiter="/"):
                    if any(o["Key"] == folder + MANIFEST_NAME for o in page.get("Contents", [])):
                        key = folder[len(self._base):-1]
                        if key and key.startswith(prefix):
                            found.append(key)
                    for cp in page.get("CommonPrefixes", []):
                        sub = cp["Prefix"][len(self._base):]
                        if (sub.rstrip("/").rpartition("/")[2] != FILES_DIR
                                and (sub.startswith(prefix) or prefix.startswith(sub))):
                            folders.append(cp["Prefix"])
        return sorted(found)

    def usage(self, prefix: str = "") -> int:
        return sum(m.total_size for k in self.keys(prefix) if (m := self.manifest(k)))

    def link(self, key: str, path: str, expires_s: float) -> str | None:
        """A presigned GET URL of one file, good for ``expires_s`` seconds."""
        m = self._published(key)
        entry = m.find(safe_relpath(path))
        if entry is None:
            raise NotFound(f"{self.url}: {key}: no file {path!r} in its manifest")
        obj = self._obj(key, FILES_DIR, m.digest(), entry.path)
        with _edge(self._name(obj)):
            url: str = self.client.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": obj},
                ExpiresIn=max(1, int(expires_s)))
        return url

    # -- writing

    def publish(self, key: str, staged: Path, manifest: Manifest, *,
                move: bool = False) -> None:
        """``staged``'s files as ``key``: uploaded (each checked against the manifest as it
        is read), then the manifest. ``move`` is for local roots; the files stay here."""
        key, staged = check_key(key), Path(staged)
        where = f"{self.url}: publish {key}"
        old = self.manifest(key)
        version = manifest.digest()
        try:
            for entry in manifest.files:
                self._put(staged, key, version, entry, where)
            obj = self._obj(key, MANIFEST_NAME)
            with _edge(self._name(obj)):  # the moment it is published
                self.client.put_object(Bucket=self.bucket, Key=obj, Body=manifest.to_json(),
                                       ContentType="application/json")
        except Exception:
            if old is None or old.digest() != version:  # never the published files
                self._remove_quietly(self._obj(key, FILES_DIR, version) + "/")
            raise
        if old is not None and old.digest() != version:
            self._remove(self._obj(key, FILES_DIR, old.digest()) + "/")

    def delete(self, key: str) -> None:
        self._published(key)
        obj = self._obj(key, MANIFEST_NAME)
        with _edge(self._name(obj)):
            self.client.delete_object(Bucket=self.bucket, Key=obj)  # the moment it is gone
        self._remove(self._obj(key, FILES_DIR) + "/")

    def orphans(self, older_than_s: float, now: float) -> list[str]:
        """File versions no manifest names whose newest object is older than
        ``older_than_s`` (interrupted publishes and deletes), as ``<key>/files/<digest>/``."""
        newest: dict[tuple[str, str], float] = {}
        with _edge(f"{self.url}: list orphans"):
            for page in self._pages(self._base):
                for o in page.get("Contents", []):
                    segs = o["Key"][len(self._base):].split("/")
                    if FILES_DIR in segs[:-2]:
                        i = segs.index(FILES_DIR)
                        group = ("/".join(segs[:i]), segs[i + 1])
                        at = _timestamp(o["LastModified"])
                        newest[group] = max(newest.get(group, at), at)
        current: dict[str, str | None] = {}
        found = []
        for (key, version), at in sorted(newest.items()):
            if at > now - older_than_s:
                continue
            if key not in current:
                try:
                    m = self.manifest(key)
                    current[key] = m.digest() if m else None
                except StorageError:  # a damaged manifest (or no key): left for a person
                    current[key] = "?"
            if current[key] not in (version, "?"):
                found.append(f"{key}/{FILES_DIR}/{version}/")
        return found

    def remove_orphans(self, older_than_s: float, now: float) -> list[str]:
        """Removes what :meth:`orphans` finds; returns it."""
        found = self.orphans(older_than_s, now)
        for rel in found:
            self._remove(self._base + rel)
        return found

    # -- helpers

    def _obj(self, key: str, *parts: str) -> str:
        return self._base + "/".join((key, *parts))

    def _name(self, obj: str) -> str:
        return f"s3://{self.bucket}/{obj}"

    def _published(self, key: str) -> Manifest:
        m = self.manifest(key)
        if m is None:
            raise NotFound(f"{self.url}: no key {key!r}")
        return m

    def _transfer_config(self) -> Any:
        if self._transfer is None:
            from boto3.s3.transfer import TransferConfig

            self._transfer = TransferConfig(multipart_threshold=MULTIPART_THRESHOLD)
        return self._transfer

    def _put(self, staged: Path, key: str, version: str, entry: Any, where: str) -> None:
        obj = self._obj(key, FILES_DIR, version, entry.path)
        with open_staged(staged, entry.path, where) as f:
            size = os.fstat(f.fileno()).st_size
            if size != entry.size:  # refused before any upload
                raise StorageError(f"{where}: {entry.path} does not match its manifest: "
                                   f"{size} bytes; the manifest says {entry.size}")
            with _edge(self._name(obj)):
                self.client.upload_fileobj(VerifyingReader(f, entry, where), self.bucket, obj,
                                           Config=self._transfer_config())

    def _get(self, key: str, version: str, path: str, where: str) -> BinaryIO:
        obj = self._obj(key, FILES_DIR, version, path)
        try:
            with _edge(self._name(obj)):
                body = self.client.get_object(Bucket=self.bucket, Key=obj)["Body"]
        except NotFound:
            raise StorageError(f"{where}: {path} is missing from the store (deleted or "
                               "republished meanwhile?)") from None
        return io.BufferedReader(_Body(body, self._name(obj)), CHUNK)

    def _pages(self, prefix: str, delimiter: str = "") -> Iterator[dict[str, Any]]:
        args = {"Bucket": self.bucket, "Prefix": prefix}
        if delimiter:
            args["Delimiter"] = delimiter
        yield from self.client.get_paginator("list_objects_v2").paginate(**args)

    def _remove(self, prefix: str) -> None:
        """Every object under ``prefix``, a thousand a request."""
        with _edge(f"{self._name(prefix)}: delete"):
            for page in self._pages(prefix):
                objs = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if not objs:
                    continue
                got = self.client.delete_objects(Bucket=self.bucket,
                                                 Delete={"Objects": objs, "Quiet": True})
                if got.get("Errors"):
                    e = got["Errors"][0]
                    raise StorageError(f"{self._name(e.get('Key', prefix))}: cannot delete: "
                                       f"{e.get('Code')}: {e.get('Message')} "
                                       f"({len(got['Errors'])} objects not deleted)")

    def _remove_quietly(self, prefix: str) -> None:
        with suppress(RotaError):  # left for remove_orphans: the publish's error is told
            self._remove(prefix)


class _Body(io.RawIOBase):
    """An object's streamed body with botocore's errors translated as it is read."""

    def __init__(self, body: Any, name: str) -> None:
        self._body, self._name = body, name

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        with _edge(self._name):
            data = self._body.read(len(buf))
        buf[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._body.close()
        super().close()


def _timestamp(t: datetime | str) -> float:
    return t.timestamp() if isinstance(t, datetime) else datetime.fromisoformat(t).timestamp()


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


# -- plain transfers: files and folders as they are, no store manifest (a pipeline's data
#    chunks, a merged model published as a folder). Each object goes up through boto3's
#    managed transfer (multipart from ``MULTIPART_THRESHOLD``, each part retried alone),
#    so it appears whole or not at all; errors as above, naming the object.

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
