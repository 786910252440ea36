"""Storage of job artifacts, datasets and workspaces: a local root or an S3 bucket behind one
interface (:class:`ObjectStore`), with manifests, atomic publish and verified fetch."""

from rota.errors import StorageError
from rota.storage.local import LocalStore
from rota.storage.manifest import (
    MANIFEST_NAME,
    FileEntry,
    Manifest,
    build_manifest,
    safe_relpath,
)
from rota.storage.s3 import S3Store
from rota.storage.store import ObjectStore, open_store

__all__ = [
    "MANIFEST_NAME",
    "FileEntry",
    "LocalStore",
    "Manifest",
    "ObjectStore",
    "S3Store",
    "StorageError",
    "build_manifest",
    "open_store",
    "safe_relpath",
]
