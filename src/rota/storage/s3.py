"""A store in an S3 bucket (AWS, or an S3-compatible server: MinIO, Ceph, R2...).

Layout under the prefix: ``<key>/MANIFEST.json`` and ``<key>/files/<digest>/<path>``, where
``<digest>`` is the manifest's digest. A publish uploads every file first (each object
appears whole or not at all, multipart uploads included), then PUTs the manifest: the
manifest's presence is what makes the key exist. A new version's files go beside the old
ones, so readers of the old manifest keep finding its files until it is replaced.

boto3 is imported on first use (``pip install 'rota[s3]'``); it finds the credentials as it
always does (``AWS_*`` variables, ``~/.aws``, an instance role). botocore's errors become
StorageError (NotFound for a missing object) at the edge (rota.storage.s3_edge). Plain
transfers, with no manifest, are rota.storage.s3_transfers.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Sequence
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
from rota.storage.s3_edge import _boto3, _edge
from rota.storage.s3_transfers import MULTIPART_THRESHOLD


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

