"""Why a job says it failed: the last ``rota: FAILED: <why>`` line of its output.

A job states its reason with ``rota.job.fail_reason`` (or by printing such a line itself)
and then exits non-zero; the daemon reads the end of the attempt's log and records the
reason with the job's end (``exit code 1: <why>``), on every pool: an engine's output is
copied into the same log. Rota's own programs write ``rota-<program>: FAILED: <why>``
(``rota-eval``). Only the attempt's own output counts: a line before the log's last
attempt header (``=== rota: job ...``) belongs to an earlier attempt.
"""

from __future__ import annotations

import re

#: How much of the end of a failed attempt's log is searched.
TAIL_BYTES = 64 * 1024
#: The longest reason kept (a longer one is cut, with an ellipsis).
MAX_REASON = 1000
_LINE = re.compile(r"^rota(?:-[a-z][a-z0-9-]{0,30})?: FAILED: (\S.*?)\s*$")
_HEADER = "=== rota: job "


def stated_reason(log_tail: bytes) -> str | None:
    """The reason in the last failure line of ``log_tail`` after its last attempt header,
    or None."""
    lines = re.split(r"\r\n|\r|\n", log_tail.decode("utf-8", "replace"))
    for line in reversed(lines):
        if line.startswith(_HEADER):
            return None
        m = _LINE.match(line)
        if m:
            why = m.group(1)
            return why if len(why) <= MAX_REASON else why[:MAX_REASON - 1] + "…"
    return None
