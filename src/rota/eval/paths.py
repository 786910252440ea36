"""The local paths of an evaluation config, read from the config file's folder.

A newcomer writes ``model: {uri: ./tiny-llama}`` beside the config; the jobs run in their own
folder (``.rota-eval/NAME-TIME``), so every relative path (the model's and the adapter's
folders, lm-eval's ``task_dir``, heldout's data files) is made absolute from the config's
folder before the jobs are made, on every pool, and again by the runner, which reads the
config as written (``ROTA_EVAL_CONFIG_DIR`` names the folder). ``validate`` checks that each
path is there (:func:`missing`). A Kubernetes pod cannot read this machine's folders: a
local model there is refused (:func:`refused_on_kubernetes`).
"""

from __future__ import annotations

import os
from typing import Any

from rota.eval.config import EvalConfig, ModelSource
from rota.eval.jobs import harness_paths, needs_fetch

_PATH_LIKE = ("/", ".", "~", "file://")


def local_folder(source: ModelSource) -> str | None:
    """The folder a model or adapter names on the machine that runs it, as written (None
    for what is fetched, or a Hugging Face name)."""
    if needs_fetch(source) or source.uri is None:
        return None
    return source.uri.removeprefix("file://") if source.uri.startswith(_PATH_LIKE) else None


def resolve(config: EvalConfig, folder: str | None) -> EvalConfig:
    """``config`` with its relative local paths made absolute from ``folder`` (the config
    file's; None: as written). A bare name (``tiny-llama``) is a folder when the config's
    folder has one by that name, else a Hugging Face name."""
    if not folder:
        return config
    model = config.model
    update: dict[str, Any] = {}
    uri = _source_path(model, folder)
    if uri is not None:
        update["uri"] = uri
    if model.adapter is not None:
        adapter = _source_path(model.adapter, folder)
        if adapter is not None:
            update["adapter"] = model.adapter.model_copy(update={"uri": adapter})
    h = config.harness
    harness: dict[str, Any] = {}
    if h.task_dir:
        harness["task_dir"] = _absolute(h.task_dir, folder)
    if h.kind == "heldout":
        harness["tasks"] = [_absolute(t, folder) for t in h.tasks]
    return config.model_copy(update={"model": model.model_copy(update=update),
                                     "harness": h.model_copy(update=harness)})


def _source_path(source: ModelSource, folder: str) -> str | None:
    """The absolute folder for a local source (None: nothing to change)."""
    written = local_folder(source)
    if written is None:
        bare = source.uri
        if bare is None or needs_fetch(source) or not os.path.isdir(os.path.join(folder, bare)):
            return None
        written = bare
    path = _absolute(written, folder)
    return None if path == source.uri else path


def _absolute(path: str, folder: str) -> str:
    return os.path.normpath(os.path.join(folder, os.path.expanduser(path)))


def missing(config: EvalConfig) -> list[tuple[tuple[str | int, ...], str]]:
    """The local paths of a resolved config that are not on this machine, each as (its
    field's loc, why)."""
    out: list[tuple[tuple[str | int, ...], str]] = []
    for loc, source in (("model",), config.model), (("model", "adapter"),
                                                     config.model.adapter):
        path = local_folder(source) if source is not None else None
        if path is not None and not os.path.isdir(path):
            out.append(((*loc, "uri"), f"no folder {path} here"))
    for hp in harness_paths(config):
        ok = os.path.isdir(hp.written) if hp.folder else os.path.isfile(hp.written)
        if not ok:
            at = tuple(int(p) if p.isdigit() else p for p in hp.field.split("."))
            out.append((at, f"no {'folder' if hp.folder else 'file'} {hp.written} here"))
    return out


def refused_on_kubernetes(config: EvalConfig) -> str | None:
    """Why a config cannot run in a pod (a model or adapter in a folder of this machine),
    with its field; None when it can."""
    for field, source in ("model.uri", config.model), ("model.adapter.uri",
                                                       config.model.adapter):
        path = local_folder(source) if source is not None else None
        if path is not None:
            return (f"{field}: {path} is a folder on this machine, which a Kubernetes pod "
                    "cannot read: log the model to MLflow (runs:/, models:/) or put it in "
                    "S3 (s3://) and name that")
    return None
