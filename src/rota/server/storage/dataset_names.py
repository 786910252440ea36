"""How a dataset version is named (rota.server.storage.datasets): the variable a job finds
it in, its key in the store, its reference ``OWNER/NAME:vN`` (what intake stores in a
spec and in ``job_datasets``), and its view in the API. The grammar of what a user may
name is the spec's (rota.core.spec); its patterns are here under the daemon's names.
"""

from __future__ import annotations

import re
from typing import Any

from rota.core.spec import DATASET_NAME, DATASET_OWNER, DATASET_REF_PARTS
from rota.store.db import redact_url
from rota.store.repo import DatasetRecord

ENV_PREFIX = "ROTA_DATASET_"
CONTAINER_ROOT = "/datasets"
NAME_RE = DATASET_NAME
OWNER_RE = DATASET_OWNER
REF = DATASET_REF_PARTS  # what a job may name: [OWNER/]NAME[:VERSION]


def env_name(name: str) -> str:
    """The variable a job finds a dataset's folder in: ROTA_DATASET_ and the name in
    capitals, other characters as ``_``."""
    return ENV_PREFIX + re.sub(r"[^A-Z0-9]", "_", name.upper())


def key_of(owner: str, name: str, digest: str) -> str:
    return f"datasets/{owner}/{name}/{digest}"


def ref_of(row: DatasetRecord) -> str:
    return f"{row.owner}/{row.name}:v{row.version}"


def split_ref(ref: str) -> tuple[str, str]:
    """(OWNER/NAME, vN) of a resolved reference."""
    dataset, _, version = ref.rpartition(":")
    return dataset, version


def version_view(row: DatasetRecord) -> dict[str, Any]:
    return {"ref": ref_of(row), "owner": row.owner, "name": row.name,
            "version": row.version, "digest": row.digest, "shared": bool(row.shared),
            "files": row.files, "bytes": row.bytes, "source": row.source,
            "description": row.description, "created_by": row.created_by,
            "created_at": row.created_at, "store": redact_url(row.store_url),
            "key": row.key}
