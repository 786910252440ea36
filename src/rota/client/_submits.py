"""Submits that are safe to send again.

Every submit carries an idempotency key (the caller's, else a new random one per logical
submit, a batch being one), and one whose connection failed is sent again with the same
key, a few times with a growing pause: the daemon answers a key it has seen with the
job(s) it made then, so a submit sent twice never makes a second copy. Standard library
only: the CLI's fast path imports it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable

from rota.errors import DaemonUnavailable, StoreError

TYPE_CHECKING = False  # typing's, without importing typing (rota.cli starts faster)
if TYPE_CHECKING:
    from typing import TypeVar

    T = TypeVar("T")

#: sends of one submit in all; pauses between them: 0.25, 0.5, 1, 2 s (about 4 s in all,
#: what a daemon restarted by its supervisor takes)
TRIES = 5
FIRST_PAUSE_S = 0.25


def new_key() -> str:
    """A key for one logical submit: 128 random bits."""
    return "auto-" + os.urandom(16).hex()


def pause(tried: int) -> float:
    """The pause after the ``tried``-th send failed (1-based)."""
    return FIRST_PAUSE_S * 2 ** (tried - 1)


def gave_up(last: DaemonUnavailable | StoreError, key: str,
            maybe_done: bool) -> DaemonUnavailable | StoreError:
    """The error after the last send, of the last one's kind: says only what is known of
    the job(s)."""
    if maybe_done:
        known = ("the daemon may or may not have stored the job(s); sending the submit "
                 f"again with idempotency key {key} is safe: it never makes a second copy")
    else:
        known = "nothing was stored"
    message = f"{last} (submit sent {TRIES} times); {known}"
    if isinstance(last, StoreError):
        return StoreError(message)
    err = DaemonUnavailable(message)
    err.maybe_done = maybe_done
    return err


def send(once: Callable[[str], T], key: str | None) -> T:
    """``once(key)`` until it is answered, at most TRIES times (blocking code)."""
    key = key or new_key()
    maybe_done = False
    for tried in range(1, TRIES + 1):
        try:
            return once(key)
        except (DaemonUnavailable, StoreError) as e:  # a store's failure stored nothing
            maybe_done = maybe_done or getattr(e, "maybe_done", False)
            if tried == TRIES:
                raise gave_up(e, key, maybe_done) from e
        time.sleep(pause(tried))
    raise AssertionError("unreachable")


async def send_async(once: Callable[[str], Awaitable[T]], key: str | None,
                     sleep: Callable[[float], Awaitable[object]]) -> T:
    """``send`` for asyncio code (``sleep``: asyncio's)."""
    key = key or new_key()
    maybe_done = False
    for tried in range(1, TRIES + 1):
        try:
            return await once(key)
        except (DaemonUnavailable, StoreError) as e:  # a store's failure stored nothing
            maybe_done = maybe_done or getattr(e, "maybe_done", False)
            if tried == TRIES:
                raise gave_up(e, key, maybe_done) from e
        await sleep(pause(tried))
    raise AssertionError("unreachable")
