"""Bring an evaluation's model (and adapter) to a local folder, once.

A source that needs fetching (an MLflow run's artifact, ``runs:/``, ``models:/``,
``mlflow-artifacts:``, ``s3://``) is downloaded into its folder unless that folder already
holds something: a pod's init container or an earlier fetch job (``--fetch-only``) put it
there. The model's folder is ``ROTA_MODEL_DIR`` when set, else ``SCRATCH/model``; the
adapter's is ``ROTA_ADAPTER_DIR`` when set, else ``SCRATCH/adapter``. A download goes to a
hidden sibling first and is moved in when complete, so a fetch cut short is never taken for
a model. A local folder is used in place; anything else is a name left to the harness
(Hugging Face).

Only what can change is tried again: a network error or a server's passing trouble (5xx,
throttling) gets two more tries here (:data:`RETRY_WAITS_S`); a run, model or object that
does not exist, or a refusal, fails at once (the fetch job has no retries of its own).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rota.errors import NotFound, StorageError
from rota.eval.config import EvalConfig, ModelSource
from rota.eval.harnesses.base import EvalFailed
from rota.eval.jobs import ADAPTER_DIR_ENV, MODEL_DIR_ENV, MODEL_TRACKING_ENV, needs_fetch

_MARKERS = ("config.json", "adapter_config.json")  # a Hugging Face model / peft adapter


#: the waits before the second and third tries of a fetch that failed in a way that can
#: change; nothing else is tried twice
RETRY_WAITS_S = (5.0, 15.0)
#: MLflow's error codes for a server's passing trouble (a refused connection is
#: INTERNAL_ERROR); RESOURCE_DOES_NOT_EXIST and the rest do not change by waiting
_MLFLOW_PASSING = frozenset({"INTERNAL_ERROR", "TEMPORARILY_UNAVAILABLE",
                             "REQUEST_LIMIT_EXCEEDED"})


class FetchUnavailable(EvalFailed):
    """A fetch that failed in a way that can change (the network, a server's 5xx)."""


@dataclass(frozen=True)
class Fetched:
    model: str
    adapter: str | None


def resolve(cfg: EvalConfig, scratch: Path, env: Mapping[str, str]) -> Fetched:
    """The model and adapter as the harness gets them, fetched first where needed."""
    model = place(cfg.model, Path(env.get(MODEL_DIR_ENV) or scratch / "model"), env)
    adapter = None
    if cfg.model.adapter is not None:
        adapter = place(cfg.model.adapter,
                        Path(env.get(ADAPTER_DIR_ENV) or scratch / "adapter"), env)
    return Fetched(model=model, adapter=adapter)


def place(source: ModelSource, dst: Path, env: Mapping[str, str]) -> str:
    if not needs_fetch(source):
        uri = source.display
        path = os.path.expanduser(uri.removeprefix("file://"))
        if os.path.isdir(path):
            return os.path.abspath(path)
        if uri.startswith(("/", ".", "~", "file://")):
            raise EvalFailed(f"no folder {uri}")
        return uri  # a Hugging Face name
    if not _filled(dst):
        print(f"fetching {source.display} into {dst}", flush=True)
        download(source, dst, env)
    return str(locate(dst))


def download(source: ModelSource, dst: Path, env: Mapping[str, str]) -> None:
    part = dst.parent / f".{dst.name}.part-{os.getpid()}"
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    try:
        uri = source.uri or ""
        if uri.startswith("s3://"):
            tried(lambda: _s3(uri, part))
        else:
            tried(lambda: _mlflow(source, part, env))
        if not _filled(part):
            raise EvalFailed(f"fetched nothing from {source.display}")
        dst.mkdir(parents=True, exist_ok=True)  # may be a mount point: move what is inside
        for child in part.iterdir():
            os.replace(child, dst / child.name)
    finally:
        shutil.rmtree(part, ignore_errors=True)


def tried(fetch: Callable[[], None], *, sleep: Callable[[float], None] = time.sleep) -> None:
    """``fetch()``, tried again after each wait of RETRY_WAITS_S while it fails in a way
    that can change (FetchUnavailable); any other failure, or the last, is raised."""
    for wait in (*RETRY_WAITS_S, None):
        try:
            fetch()
            return
        except FetchUnavailable as e:
            if wait is None:
                raise
            print(f"rota-eval: {e}; trying again in {wait:g}s", flush=True)
            sleep(wait)


def locate(folder: Path) -> Path:
    """The model inside a fetched folder: the folder itself, or its one subfolder (an MLflow
    artifact folder keeps its name: ``mlflow artifacts download`` gives ``DST/model``)."""
    if any((folder / m).is_file() for m in _MARKERS):
        return folder
    children = [c for c in folder.iterdir() if not c.name.startswith(".")]
    if len(children) == 1 and children[0].is_dir():
        return locate(children[0])
    return folder


def _filled(folder: Path) -> bool:
    return folder.is_dir() and any(not c.name.startswith(".") for c in folder.iterdir())


def _mlflow(source: ModelSource, dst: Path, env: Mapping[str, str]) -> None:
    try:
        from mlflow.artifacts import download_artifacts
    except ImportError:
        raise EvalFailed(f"fetching {source.display} needs MLflow: pip install "
                         "'rota[trackers]'") from None
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")  # fail in seconds, not minutes
    try:
        if source.mlflow is not None:
            download_artifacts(run_id=source.mlflow.run_id,
                               artifact_path=source.mlflow.artifact_path,
                               tracking_uri=source.mlflow.tracking_uri, dst_path=str(dst))
        else:
            uri = env.get(MODEL_TRACKING_ENV) or env.get("MLFLOW_TRACKING_URI") or None
            download_artifacts(artifact_uri=source.uri, tracking_uri=uri, dst_path=str(dst))
    except Exception as e:  # MlflowException, an unreachable server, a missing artifact
        passing = getattr(e, "error_code", None) in _MLFLOW_PASSING or \
            isinstance(e, ConnectionError | TimeoutError)
        raise (FetchUnavailable if passing else EvalFailed)(
            f"cannot fetch {source.display} from MLflow: {type(e).__name__}: "
            f"{_first_line(e)}") from None


def _s3(uri: str, dst: Path) -> None:
    """Every object under the URI's prefix into ``dst`` (rota.storage.s3_transfers.download_prefix:
    the folders below the prefix kept, nothing outside it written)."""
    from rota.storage.s3_transfers import download_prefix

    def skipped(key: str) -> None:
        print(f"rota-eval: skipped s3://{uri.removeprefix('s3://').partition('/')[0]}/"
              f"{key}: outside {uri}", flush=True)

    try:
        got = download_prefix(uri, dst, skipped=skipped)
    except (StorageError, NotFound) as e:  # no credentials, no bucket, denied, the network
        passing = isinstance(e, StorageError) and e.passing
        said = _first_line(e).removeprefix(f"{uri}: ")  # (the storage layer names it too)
        raise (FetchUnavailable if passing else EvalFailed)(
            f"cannot fetch {uri}: {said}") from None
    if not got:
        raise EvalFailed(f"no model at {uri}: no objects under that prefix")


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0][:500]
