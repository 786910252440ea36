"""The bucket's side of a synced folder (rota.storage.sync): the plain objects under
``s3://bucket/prefix/``, listed, read, written with the file's mode as metadata (rclone's
form), copied and deleted through boto3's client, with Rota's errors (rota.storage.s3_edge).
"""

from __future__ import annotations

from typing import Any

from rota.errors import StorageError
from rota.storage.s3_edge import _edge
from rota.storage.s3_transfers import MULTIPART_THRESHOLD

#: the object metadata that carries a file's mode (rclone's key and form), so that a
#: script comes back executable
MODE_KEY = "mode"


class Remote:
    """The objects under ``s3://bucket/prefix/`` through boto3's ``client``."""

    def __init__(self, client: Any, bucket: str, prefix: str) -> None:
        self.client, self.bucket = client, bucket
        self.prefix = prefix.strip("/")
        self.base = f"{self.prefix}/" if self.prefix else ""
        self.url = f"s3://{bucket}/{self.prefix}".rstrip("/")

    def key(self, rel: str) -> str:
        return self.base + rel

    def name(self, rel: str) -> str:
        return f"s3://{self.bucket}/{self.key(rel)}"

    def listing(self, skipped: list[str] | None = None) -> dict[str, tuple[int, str]]:
        """Path below the prefix -> (size, ETag) of every object; folder markers and keys
        that are no plain relative path (``..``, ``//``) are passed over."""
        found: dict[str, tuple[int, str]] = {}
        with _edge(f"{self.url}: list"):
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.base)
            for page in pages:
                for obj in page.get("Contents", []):
                    rel = obj["Key"][len(self.base):]
                    if not rel or rel.endswith("/"):
                        continue  # a folder marker
                    if not _plain(rel):
                        if skipped is not None:
                            skipped.append(f"{rel}: not a plain path")
                        continue
                    found[rel] = (int(obj.get("Size") or 0), str(obj.get("ETag") or ""))
        return found

    def get(self, rel: str) -> tuple[Any, int, str, int | None]:
        """(streamed body, size, ETag, mode) of the object now: the ETag of the bytes read;
        the file mode its ``mode`` metadata gives (None: none, or not a mode)."""
        with _edge(self.name(rel)):
            got = self.client.get_object(Bucket=self.bucket, Key=self.key(rel))
        return (got["Body"], int(got.get("ContentLength") or 0), str(got.get("ETag") or ""),
                _mode_of(got.get("Metadata") or {}))

    def put(self, rel: str, f: Any, size: int, mode: int) -> str:
        """Upload the open file ``f`` (``size`` bytes, file mode ``mode``) as the object;
        its ETag."""
        where = self.name(rel)
        meta = {MODE_KEY: f"0{mode:o}"}  # rclone's form: st_mode in octal, "0100755"
        with _edge(where):
            if size < MULTIPART_THRESHOLD:  # one request, which answers the ETag
                got = self.client.put_object(Bucket=self.bucket, Key=self.key(rel), Body=f,
                                             Metadata=meta)
                return str(got.get("ETag") or "")
            from rota.storage.s3_transfers import transfer_config

            self.client.upload_fileobj(f, self.bucket, self.key(rel), Config=transfer_config(),
                                       ExtraArgs={"Metadata": meta})
            head = self.client.head_object(Bucket=self.bucket, Key=self.key(rel))
            return str(head.get("ETag") or "")

    def copy(self, rel: str, to: str) -> None:
        """Copy the object, in the bucket (boto3's managed copy: in parts for a big one, as
        one CopyObject stops at 5 GB)."""
        from rota.storage.s3_transfers import transfer_config

        with _edge(f"{self.name(rel)} -> {self.name(to)}"):
            self.client.copy({"Bucket": self.bucket, "Key": self.key(rel)}, self.bucket,
                             self.key(to), Config=transfer_config())

    def delete(self, rels: list[str]) -> None:
        """Delete these objects, a thousand a request."""
        for i in range(0, len(rels), 1000):
            batch = rels[i:i + 1000]
            with _edge(f"{self.url}: delete"):
                got = self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": self.key(r)} for r in batch], "Quiet": True})
            if got.get("Errors"):
                e = got["Errors"][0]
                raise StorageError(f"s3://{self.bucket}/{e.get('Key')}: cannot delete: "
                                   f"{e.get('Code')}: {e.get('Message')} "
                                   f"({len(got['Errors'])} objects not deleted)")


def _mode_of(meta: dict[str, str]) -> int | None:
    mode = meta.get(MODE_KEY, "")
    try:
        return int(mode, 8) if mode.isdigit() else None
    except ValueError:  # (an 8 or a 9)
        return None


def _plain(rel: str) -> bool:
    parts = rel.split("/")
    return "\0" not in rel and all(p not in ("", ".", "..") for p in parts)
