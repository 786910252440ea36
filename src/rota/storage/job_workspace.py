"""The workspace of a job on a cluster pool whose nodes share no folder with the daemon,
when the workspaces' home is a bucket (``[storage] workspace_url``): the job brings its
workspace to the node before its command and sends back what the command changed after
it, the way SkyPilot's COPY mode or an init container and a sidecar would, but in the
job's own process (rota.storage.job_fetch runs it), so one model serves Slurm, Ray and
Kubernetes alike.

``ROTA_WORKSPACE_SYNC`` says which, as JSON::

    {"url": "s3://bucket/prefix/USER/PROJECT", "name": "USER/PROJECT",
     "endpoint_url": null, "region": null}

The node's copy lives under ``ROTA_WORKSPACE_CACHE`` (a Kubernetes pod's scratch volume),
else ``$XDG_CACHE_HOME/rota/workspaces``, else ``~/.cache/rota/workspaces``: ``NAME`` is
the folder, ``.sync/NAME.json`` the index of what both sides last held
(rota.storage.sync's rules: a file changed on both sides is kept here and sent up, the
bucket's version kept beside it as a conflict copy; a deletion crosses only for a file the
index knew). Jobs of one workspace on one node share
the copy; each sync of it holds ``.sync/NAME.lock`` (flock), so two never interleave.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from rota.errors import StorageError
from rota.storage._common import node_cache
from rota.storage.s3_transfers import make_client, split_uri
from rota.storage.sync import Counts, sync_down, sync_up
from rota.storage.sync_index import load_index, save_index
from rota.storage.sync_remote import Remote

SYNC_ENV = "ROTA_WORKSPACE_SYNC"
CACHE_ENV = "ROTA_WORKSPACE_CACHE"
WORKSPACE_ENV = "ROTA_WORKSPACE"
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]*")


@dataclass(frozen=True)
class WorkspacePlan:
    url: str  # s3://bucket/prefix/USER/PROJECT
    name: str  # USER/PROJECT: the copy's folder below the node's cache
    endpoint_url: str | None = None
    region: str | None = None

    def env(self) -> dict[str, str]:
        """What the daemon gives the job (``ROTA_WORKSPACE_SYNC``)."""
        doc = {"url": self.url, "name": self.name, "endpoint_url": self.endpoint_url,
               "region": self.region}
        return {SYNC_ENV: json.dumps(doc, separators=(",", ":"))}


def read_plan(text: str) -> WorkspacePlan:
    """``ROTA_WORKSPACE_SYNC``'s JSON; ValueError naming what is wrong."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{SYNC_ENV} is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{SYNC_ENV} is not a JSON object")
    url, name = doc.get("url"), doc.get("name")
    if not isinstance(url, str) or not url.startswith("s3://"):
        raise ValueError(f"{SYNC_ENV}: 'url' {url!r} is not an s3:// URL")
    try:
        split_uri(url)  # (a bucket is named)
    except StorageError as e:
        raise ValueError(f"{SYNC_ENV}: {e}") from None
    parts = name.split("/") if isinstance(name, str) else []
    if len(parts) != 2 or not all(_PART.fullmatch(p) for p in parts):
        raise ValueError(f"{SYNC_ENV}: 'name' {name!r} is not USER/PROJECT")
    optional = {}
    for key in ("endpoint_url", "region"):
        value = doc.get(key)
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{SYNC_ENV}: {key!r} is not text or null: {value!r}")
        optional[key] = value or None
    return WorkspacePlan(url, str(name), **optional)


def cache_root(environ: Mapping[str, str]) -> Path:
    """Where the node's copies are: ``ROTA_WORKSPACE_CACHE``, else the XDG cache folder."""
    return node_cache(environ, CACHE_ENV, "workspaces")


class NodeCopy:
    """One workspace's copy on this node, synced with its prefix of the bucket."""

    def __init__(self, plan: WorkspacePlan, root: Path) -> None:
        self.plan = plan
        self.folder = root / plan.name
        sync_dir = root / ".sync"
        self.index_path = sync_dir / f"{plan.name}.json"
        self.lock_path = sync_dir / f"{plan.name}.lock"
        self.staging = sync_dir / f"staging-{os.getpid()}"
        bucket, prefix = split_uri(plan.url)
        self.remote = Remote(None, bucket, prefix)

    def bring(self) -> Counts:
        """The bucket's changes since the last sync of this node, brought here."""
        with self._locked():
            index = load_index(self.index_path)
            try:
                return sync_down(self.remote, self.folder, index, staging=self.staging)
            finally:
                save_index(self.index_path, index)  # what was done, should the rest fail
                with contextlib.suppress(OSError):
                    os.rmdir(self.staging)

    def send_back(self) -> Counts:
        """What changed here since the last sync, sent to the bucket (the index read again:
        another job of the workspace on this node may have synced meanwhile)."""
        with self._locked():
            index = load_index(self.index_path)
            try:
                return sync_up(self.remote, self.folder, index)
            finally:
                save_index(self.index_path, index)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.lock_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.remote.client is None:
            self.remote.client = make_client(endpoint_url=self.plan.endpoint_url,
                                             region=self.plan.region, what="workspace")
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the flock
