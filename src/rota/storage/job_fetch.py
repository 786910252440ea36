"""What a job on a cluster pool (Slurm, Ray, Kubernetes) needs on the node where it
landed, brought there by the job itself before its command: its datasets, and its
workspace when the pool's nodes share none with the daemon (rota.storage.job_workspace).

    python -m rota.storage.job_fetch -- COMMAND [ARGS...]

The daemon cannot reach such a node's disk, so the job fetches for itself, with the
credentials its environment gives (``AWS_*`` for a bucket). ``ROTA_DATASETS_FETCH`` says
which datasets, as JSON::

    {"store": "s3://bucket/prefix", "endpoint_url": null, "region": null,
     "datasets": [{"env": "ROTA_DATASET_IMAGENET", "key": "...", "digest": "<64 hex>",
                   "ref": "alice/imagenet:v2"}]}

Each dataset goes through the node's :class:`~rota.storage.cache.DatasetCache` (so the
jobs of a node fetch a version once, and one an earlier job changed is fetched again)
under ``ROTA_DATASET_CACHE``, else ``$XDG_CACHE_HOME/rota/datasets``, else
``~/.cache/rota/datasets``, holding at most
``ROTA_DATASET_CACHE_LIMIT`` bytes (no limit when unset). Its variable ``env`` is set to
the version's read-only folder. ``ROTA_WORKSPACE_SYNC`` names a workspace to bring from
its bucket (``ROTA_WORKSPACE`` is then its copy here).

COMMAND runs without a shell (its arguments arrive as they were given): exec'd in this
process's place, or, with a workspace to send back when it ends, as a child that gets the
signals this process gets; either way its exit status is the job's (128+N for a signal N).

Exit status when it cannot: 75 (EX_TEMPFAIL) for a failure that may pass (the store could
not be reached, throttling: worth retrying the job), 2 otherwise (a missing key, a key
republished since the job was submitted, a cache too small, a bad setting). A command
that succeeded and whose workspace could not be sent back ends with one of those.

Standard library and rota.storage only: it starts inside every such job.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rota.errors import RotaError, StorageError
from rota.storage import job_workspace
from rota.storage._common import node_cache
from rota.storage.cache import DatasetCache
from rota.storage.store import open_store
from rota.units import format_memory

FETCH_ENV = "ROTA_DATASETS_FETCH"
CACHE_ENV = "ROTA_DATASET_CACHE"
CACHE_LIMIT_ENV = "ROTA_DATASET_CACHE_LIMIT"
EX_TEMPFAIL = 75
EX_USAGE = 2
USAGE = "usage: python -m rota.storage.job_fetch -- COMMAND [ARGS...]"
#: what an engine sends a job it stops (or a person at a terminal): passed on to the command
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Dataset:
    env: str  # the variable that gets the version's folder
    key: str  # in the store
    digest: str  # the version the job was submitted with
    ref: str  # what the user named (owner/name:tag), for messages


@dataclass(frozen=True)
class Plan:
    store: str
    endpoint_url: str | None
    region: str | None
    datasets: tuple[Dataset, ...]


def wrap(argv: list[str], python: str = "python3") -> list[str]:
    """``argv`` run by this module: what a cluster backend starts for a job with datasets
    (``python``: an interpreter with Rota installed where the job runs)."""
    return [python, "-m", "rota.storage.job_fetch", "--", *argv]


def read_plan(text: str | None) -> Plan:
    """``ROTA_DATASETS_FETCH``'s JSON; ValueError naming what is wrong."""
    if text is None:
        raise ValueError(f"{FETCH_ENV} is not set")
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{FETCH_ENV} is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{FETCH_ENV} is not a JSON object")
    store = doc.get("store")
    if not isinstance(store, str) or not store:
        raise ValueError(f"{FETCH_ENV}: 'store' (the store's URL) is missing or not text")
    endpoint_url, region = _optional(doc, "endpoint_url"), _optional(doc, "region")
    items = doc.get("datasets")
    if not isinstance(items, list):
        raise ValueError(f"{FETCH_ENV}: 'datasets' is missing or not a list")
    datasets = tuple(_dataset(i, item) for i, item in enumerate(items))
    names = [d.env for d in datasets]
    if len(set(names)) != len(names):
        raise ValueError(f"{FETCH_ENV}: a variable is named by two datasets: {names}")
    return Plan(store, endpoint_url, region, datasets)


def cache_root(environ: Mapping[str, str]) -> Path:
    """Where the node's cache is: ``ROTA_DATASET_CACHE``, else the XDG cache folder."""
    return node_cache(environ, CACHE_ENV, "datasets")


def cache_limit(environ: Mapping[str, str]) -> int | None:
    """``ROTA_DATASET_CACHE_LIMIT`` in bytes; None (no limit) when unset or empty."""
    text = environ.get(CACHE_LIMIT_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit():
        raise ValueError(f"{CACHE_LIMIT_ENV}={text!r} is not a number of bytes")
    return int(text)


def main(argv: list[str]) -> int:
    """Fetches, then runs the command: exec'd in this process's place, or, with a workspace
    to send back, as a child whose exit status becomes this one's."""
    if len(argv) < 2 or argv[0] != "--":
        print(USAGE, file=sys.stderr)
        return EX_USAGE
    command = argv[1:]
    if not os.environ.get(FETCH_ENV) and not os.environ.get(job_workspace.SYNC_ENV):
        print(f"rota: nothing to bring: neither {FETCH_ENV} nor {job_workspace.SYNC_ENV} "
              "is set", file=sys.stderr)
        return EX_USAGE
    try:
        workspace = _workspace_copy(os.environ)
    except (ValueError, RotaError, OSError) as e:
        print(f"rota: cannot bring the workspace: {e}", file=sys.stderr)
        return _status(e)
    if FETCH_ENV in os.environ:
        status = _fetch_datasets()
        if status is not None:
            return status
    if workspace is not None:
        try:
            counts = workspace.bring()
        except (RotaError, OSError) as e:
            print(f"rota: cannot bring workspace {workspace.plan.name}: {e}", file=sys.stderr)
            return _status(e)
        os.environ[job_workspace.WORKSPACE_ENV] = str(workspace.folder)
        os.environ.pop(job_workspace.SYNC_ENV, None)
        print(f"rota: workspace {workspace.plan.name} at {workspace.folder} "
              f"({counts.text()})", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    if workspace is None:
        return _exec(command)
    return _run_then_send_back(command, workspace)


def _workspace_copy(environ: Mapping[str, str]) -> job_workspace.NodeCopy | None:
    text = environ.get(job_workspace.SYNC_ENV)
    if not text:
        return None
    return job_workspace.NodeCopy(job_workspace.read_plan(text),
                                  job_workspace.cache_root(environ))


def _fetch_datasets() -> int | None:
    """Each dataset fetched and its variable set; the exit status when one cannot be."""
    try:
        plan = read_plan(os.environ.get(FETCH_ENV))
        cache = DatasetCache(cache_root(os.environ), cache_limit(os.environ))
        store = open_store(plan.store, endpoint_url=plan.endpoint_url, region=plan.region)
    except (ValueError, RotaError, OSError) as e:
        print(f"rota: cannot fetch datasets: {e}", file=sys.stderr)
        return _status(e)
    with contextlib.suppress(RotaError, OSError):  # best effort: a node has no daemon
        cache.clean_leftovers(time.time())  # to tidy its cache after killed jobs
    keep = {d.digest for d in plan.datasets}  # none of this job's evicts another
    for d in plan.datasets:
        try:
            # held until the command ends (inherited through its exec): no other job on
            # this node evicts it meanwhile
            os.set_inheritable(cache.hold(d.digest), True)
            # (a copy an earlier job here changed is fetched again, and the log says so)
            path = cache.fetch(store, d.key, d.digest, keep=keep, now=time.time(),
                               changed=functools.partial(_changed, d.ref))
        except (RotaError, OSError) as e:
            print(f"rota: cannot fetch dataset {d.ref}: {e}", file=sys.stderr)
            return _status(e)
        os.environ[d.env] = str(path)
        entry = cache.entry(d.digest)
        what = "" if entry is None else \
            f" ({entry.files} file{'' if entry.files == 1 else 's'}, " \
            f"{format_memory(entry.size)})"
        print(f"rota: dataset {d.ref} ready at {path}{what}", file=sys.stderr)
    os.environ.pop(FETCH_ENV, None)  # the command's own children need not see it
    return None


def _changed(ref: str, _name: str) -> None:
    print(f"rota: dataset {ref} was changed in this node's cache since it was verified; "
          "fetched again", file=sys.stderr)


def _exec(command: list[str]) -> int:
    try:
        os.execvp(command[0], command)
    except OSError as e:
        print(f"rota: cannot run {command[0]!r}: {e.strerror or e}", file=sys.stderr)
        return 127 if isinstance(e, FileNotFoundError) else 126  # as a shell does
    return 0  # not reached: exec replaced this process


def _run_then_send_back(command: list[str], workspace: job_workspace.NodeCopy) -> int:
    """The command as a child, the signals an engine sends to stop the job passed on to
    it (a Kubernetes pod's are this process's alone), then the workspace sent back, even
    when the command failed or was stopped: what it wrote so far is kept."""
    child: subprocess.Popen[bytes] | None = None
    early: list[int] = []  # signals that came before the child was there

    def forward(signum: int, _frame: object) -> None:
        if child is None:
            early.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    try:
        child = subprocess.Popen(command)
    except OSError as e:
        print(f"rota: cannot run {command[0]!r}: {e.strerror or e}", file=sys.stderr)
        return 127 if isinstance(e, FileNotFoundError) else 126
    for signum in early:
        child.send_signal(signum)
    returncode = child.wait()  # (retried by Python when a forwarded signal interrupts it)
    status = 128 - returncode if returncode < 0 else returncode  # as a shell tells a signal
    try:
        counts = workspace.send_back()
    except (RotaError, OSError) as e:
        print(f"rota: cannot send workspace {workspace.plan.name} back: {e}; its copy stays "
              f"at {workspace.folder} on this node", file=sys.stderr)
        return status or _status(e)
    print(f"rota: workspace {workspace.plan.name} sent back ({counts.text()})",
          file=sys.stderr)
    return status


def _status(e: BaseException) -> int:
    return EX_TEMPFAIL if isinstance(e, StorageError) and e.passing else EX_USAGE


def _optional(doc: dict[str, Any], name: str) -> str | None:
    value = doc.get(name)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{FETCH_ENV}: {name!r} is not text or null: {value!r}")
    return value or None


def _dataset(i: int, item: Any) -> Dataset:
    where = f"{FETCH_ENV}: datasets[{i}]"
    if not isinstance(item, dict):
        raise ValueError(f"{where} is not a JSON object")
    env, key, digest = item.get("env"), item.get("key"), item.get("digest")
    if not isinstance(env, str) or not _ENV_NAME.fullmatch(env):
        raise ValueError(f"{where}: 'env' {env!r} is not a variable name")
    if not isinstance(key, str) or not key:
        raise ValueError(f"{where}: 'key' {key!r} is not a store key")
    if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
        raise ValueError(f"{where}: 'digest' {digest!r} is not 64 lowercase hex digits")
    ref = item.get("ref")
    return Dataset(env, key, digest, ref if isinstance(ref, str) and ref else key)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
