"""Rota: a GPU job scheduler and ML run orchestrator.

``rota.Client`` / ``rota.AsyncClient`` talk to a daemon; ``rota.Job`` and the other models
are what they answer. They are imported on first use, so ``import rota`` (and the CLI's
start-up) stays cheap.
"""

from __future__ import annotations

from importlib import import_module

#: typing.TYPE_CHECKING without importing typing (a few ms of every `rota` command)
TYPE_CHECKING = False

__version__ = "0.1.0"

__all__ = [
    "Alert", "AsyncClient", "Attempt", "Checkpoint", "Checkpoints", "Client", "Conflict",
    "DaemonUnavailable", "Event", "Forbidden", "Gpu", "Health", "Identity", "InvalidSpec",
    "Job", "JobDetail", "JobState", "LogChunk", "Metrics", "NotFound", "Page", "Progress",
    "QueuePage", "QueueSummary", "Reason", "RequestTooLarge", "RotaError", "StoreError",
    "Unauthorized", "WaitTimeout", "Why", "__version__",
]

_ERRORS = ("Conflict", "DaemonUnavailable", "Forbidden", "InvalidSpec", "NotFound",
           "RequestTooLarge", "RotaError", "StoreError", "Unauthorized", "WaitTimeout")

#: public name -> module that defines it (everything but the clients and errors: models)
_LAZY: dict[str, str] = {
    **dict.fromkeys(__all__[:-1], "rota.client.models"),
    **dict.fromkeys(_ERRORS, "rota.errors"),
    "Client": "rota.client.sync",
    "AsyncClient": "rota.client.aio",
}

if TYPE_CHECKING:
    from typing import Any

    from rota.client.aio import AsyncClient
    from rota.client.models import (
        Alert,
        Attempt,
        Checkpoint,
        Checkpoints,
        Event,
        Gpu,
        Health,
        Identity,
        Job,
        JobDetail,
        JobState,
        LogChunk,
        Metrics,
        Page,
        Progress,
        QueuePage,
        QueueSummary,
        Reason,
        Why,
    )
    from rota.client.sync import Client
    from rota.errors import (
        Conflict,
        DaemonUnavailable,
        Forbidden,
        InvalidSpec,
        NotFound,
        RequestTooLarge,
        RotaError,
        StoreError,
        Unauthorized,
        WaitTimeout,
    )


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rota' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
