"""Batches of the daemon's work: one transaction each, whose items fail alone."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager

from rota.errors import StoreError

log = logging.getLogger("rota.daemon")

#: opens a batch: one transaction; should its commit fail, the daemon takes its work up
#: again from the store (see Daemon.batch)
Batch = Callable[[], AbstractContextManager[None]]


def each(fn: Callable[..., None], *args: object) -> None:
    """One item of a batch: its failure is logged and must not undo the others; but a
    failure of the store itself fails the whole batch (its transaction is broken)."""
    try:
        fn(*args)
    except StoreError:
        raise
    except Exception:
        log.exception("handling %s%r failed", fn.__name__, args[:1])
