"""The one interface over a local root and S3-compatible buckets, and ``open_store``.

A store holds published keys; a key is a set of files with their manifest. Publishing is
atomic (readers see the previous version or the whole new one), fetching is verified (size
and sha256 of every file) and never leaves a half-fetched folder behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO, Protocol
from urllib.parse import unquote, urlsplit

from rota.errors import StorageError
from rota.storage.local import LocalStore
from rota.storage.manifest import Manifest
from rota.storage.s3 import S3Store

__all__ = ["LocalStore", "ObjectStore", "S3Store", "StorageError", "open_store"]


class ObjectStore(Protocol):
    #: what the store was opened with; never credentials
    url: str

    def publish(self, key: str, staged: Path, manifest: Manifest, *,
                move: bool = False) -> None:
        """The manifest's files, read from the folder ``staged``, become ``key`` at once
        (replacing its previous version). A staged file that does not match the manifest
        is refused; files of ``staged`` not in the manifest are not published."""
        ...

    def manifest(self, key: str) -> Manifest | None:
        """The key's manifest; None when it is not published."""
        ...

    def fetch(self, key: str, dest: Path, paths: Sequence[str] | None = None) -> Manifest:
        """The key's files (or only ``paths``) into the new folder ``dest``, each verified;
        ``dest`` appears only when all arrived. Returns the key's whole manifest."""
        ...

    def open(self, key: str, path: str, *, manifest: Manifest | None = None) -> BinaryIO:
        """One file of the key as a stream (not verified: read it whole and compare);
        ``manifest``: the key's, read already (many files opened in turn)."""
        ...

    def delete(self, key: str) -> None:
        """The key is unpublished at once, then its files are removed."""
        ...

    def keys(self, prefix: str = "") -> list[str]:
        """Published keys starting with ``prefix``, sorted."""
        ...

    def usage(self, prefix: str = "") -> int:
        """Bytes of the published files of keys starting with ``prefix``."""
        ...

    def link(self, key: str, path: str, expires_s: float) -> str | None:
        """A URL that downloads the file without credentials until it expires; None when
        the store has no server of its own (a local root)."""
        ...

    def orphans(self, older_than_s: float, now: float) -> list[str]:
        """Leftovers of interrupted publishes older than ``older_than_s``."""
        ...

    def remove_orphans(self, older_than_s: float, now: float) -> list[str]:
        """Removes :meth:`orphans`' leftovers; returns them."""
        ...


def open_store(url: str, *, endpoint_url: str | None = None,
               region: str | None = None) -> ObjectStore:
    """``/abs/path`` or ``file:///abs/path``: a local root; ``s3://bucket[/prefix]``: a
    bucket (``endpoint_url`` for an S3-compatible server)."""
    accepted = "an absolute path, file:///abs/path or s3://bucket[/prefix]"
    if url.startswith("/"):
        return LocalStore(Path(url))
    parts = urlsplit(url)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise StorageError(f"store {url!r}: a file URL names a local absolute path "
                               "(file:///abs/path)")
        return LocalStore(Path(unquote(parts.path)))
    if parts.scheme == "s3":
        if not parts.netloc or parts.query or parts.fragment:
            raise StorageError(f"store {url!r}: expected s3://bucket[/prefix]")
        try:
            return S3Store(parts.netloc, parts.path, endpoint_url=endpoint_url, region=region)
        except StorageError as e:
            raise StorageError(f"store {url!r}: prefix: {e}") from None
    raise StorageError(f"store {url!r}: not a store URL: use {accepted}")
