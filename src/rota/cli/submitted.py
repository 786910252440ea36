"""What a submit answered, as `rota submit` (a command or a file) and `rota eval` print it,
and how the daemon names the job of a batch an error is about."""

from __future__ import annotations

import re
from collections.abc import Iterable

from rota.cli.common import Plain

TYPE_CHECKING = False  # typing's, without importing typing (rota.cli starts faster)
if TYPE_CHECKING:
    from rota.answers import JobAnswer

#: how the daemon names item i of a batch in an error
JOB_ITEM = re.compile(r"^jobs\[(\d+)\]: ")


def job_ids(jobs: Iterable[JobAnswer]) -> str:
    return ", ".join(str(j["id"]) for j in jobs)


def submitted_text(jobs: list[JobAnswer]) -> Plain:
    if not jobs:
        return Plain("nothing submitted: an identical job is already queued or done (--dedup)")
    if len(jobs) == 1:
        return Plain(f"submitted job {jobs[0]['id']}")
    lines = [f"submitted {len(jobs)} jobs: {job_ids(jobs)}"]
    lines += [f"  {j['id']}  {j['name']}" for j in jobs]
    return Plain("\n".join(lines))
