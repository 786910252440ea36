"""`rota submit -f FILE`: a YAML/JSON (or line-format) file of specs, sent in chunks.

The specs go to the daemon as written and the daemon checks them, so this path loads no
spec model (pydantic: ~0.15 s of a 2,000-job file's call before its first request). An
error about item i of a request (``jobs[i]: ...``) becomes an error on that item's line,
and the rest of the request is sent again: nothing already accepted is lost. After the
first such error every item still to send is checked here too, with the spec model, so a
bad spec is worded (and placed on its field's line) as the daemon's jobs-file watcher
words it, and a file of many bad items costs no request per item.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace

from rota.cli.common import client, emit, fail, warn
from rota.cli.lazy_typer import Exit
from rota.cli.submitted import JOB_ITEM, job_ids, submitted_text
from rota.errors import InvalidSpec, RotaError
from rota.jobsfile import (
    JobsFileError,
    JobsFileItem,
    decode_jobs_file,
    drop_undecodable_items,
    fmt_for_path,
    read_jobs_text,
)

TYPE_CHECKING = False  # typing's, without importing typing (`rota submit -f` starts faster)
if TYPE_CHECKING:
    from typing import Any

if TYPE_CHECKING:
    from pathlib import Path

    from rota.answers import JobAnswer, SubmitAnswer
    from rota.client import RawClient as Client

#: specs per request: the daemon starts jobs between requests, so a file's first jobs run
#: while the rest is sent. 2,000 `true` jobs straight to the daemon, first submit to last
#: end, median of 4 on fresh daemons: 100 a request 3.4 s, 200 3.2 s, 25 4.1 s, all in one
#: 3.8 s; on a daemon holding 20,000 ended jobs, 100 a request 6.6-6.9 s, 200 9.2-10.8 s,
#: one 13-16 s. (One request also takes at most 10,000.) A smaller first request (20, 32,
#: 50) started the first job no sooner through the CLI: 0.15-0.23 s after the call each.
FILE_CHUNK = 100


def read_jobs_file(path: Path) -> tuple[list[JobsFileItem], list[JobsFileError]]:
    """The file's items as written (``cwd`` made absolute, here by default) and what could
    not be read as an item at all."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InvalidSpec(f"--file: cannot read {str(path)!r}: {e.strerror or e}",
                          field="file") from None
    text, utf8 = decode_jobs_file(data)
    items, errors = read_jobs_text(text, fmt=fmt_for_path(path), source=str(path))
    if not utf8:
        items, bad = drop_undecodable_items(items)
        errors = sorted(errors + [replace(e, source=str(path)) for e in bad],
                        key=lambda e: e.line)
    here = os.getcwd()
    out = []
    for item in items:
        cwd = item.data.get("cwd")
        if not cwd or isinstance(cwd, str):  # anything else is the daemon's to refuse
            cwd = os.path.abspath(cwd) if cwd else here
        out.append(JobsFileItem(item.line, {**item.data, "cwd": cwd}, item.number, item.node))
    return out, errors


def submit_file(path: Path, *, json_out: bool, dedup: bool, idempotency_key: str | None,
                force: bool) -> None:
    """Queue the file's good items; print the jobs, and each bad item as ``FILE:LINE:
    reason`` on stderr (then exit 2)."""
    items, errors = read_jobs_file(path)
    jobs: list[JobAnswer] = []
    good_specs = False  # any item the spec model did not refuse
    if items:
        with client() as c:
            upload = FileUpload(c, items, str(path), idempotency_key=idempotency_key,
                                dedup=dedup, force=force)
            try:
                upload.run()
            except RotaError:
                if upload.jobs:
                    warn(f"{len(upload.jobs)} job(s) were submitted before this error: "
                         f"{job_ids(upload.jobs)}")
                raise
        for w in upload.warnings:
            warn(w)
        # "nothing submitted: an identical job is already queued" only when some item was
        # not refused: every refused item is an error of its own
        jobs, good_specs = upload.jobs, len(upload.errors) < len(items)
        errors = sorted(errors + upload.errors, key=lambda e: e.line)
    if not items and not errors:
        errors = [JobsFileError(0, "no job specs in the file", str(path))]
    _report(jobs, errors, json_out=json_out, shown=good_specs)


def _report(jobs: list[JobAnswer], errors: list[JobsFileError], *, json_out: bool,
            shown: bool) -> None:
    out: dict[str, Any] = {"jobs": jobs}
    if errors:
        out["errors"] = [{"line": e.line, "message": e.message} for e in errors]
    emit(out, json_out, lambda d: submitted_text(d["jobs"]) if shown else None)
    if not errors:
        return
    if not json_out:
        for e in errors:
            fail(str(e))
        if jobs:
            fail(f"{len(errors)} spec(s) were not submitted; the other {len(jobs)} were. "
                 "Fix them and submit the file again with --dedup to skip the rest.")
    raise Exit(2)


class FileUpload:
    """A file's items on their way to the daemon, request by request: ``jobs`` holds what
    the daemon accepted so far, ``errors`` the items not taken, ``warnings`` its warnings.
    """

    def __init__(self, c: Client, items: list[JobsFileItem], source: str, *,
                 idempotency_key: str | None = None, dedup: bool = False,
                 force: bool = False) -> None:
        self.c, self.source = c, source
        self.options: dict[str, Any] = {"idempotency_key": idempotency_key, "dedup": dedup,
                                        "force": force}
        self.jobs: list[JobAnswer] = []
        self.warnings: list[str] = []
        self.errors: list[JobsFileError] = []
        self.checked = False  # every item is checked here (after the daemon refused one)
        # what JSON cannot carry as it is (a date, a set, infinity, a key that is not a
        # string) is checked here first, so the error is the spec model's, as it always was
        self.pending = self._keep_good(items, everything=False)

    def run(self) -> None:
        """Send every item, FILE_CHUNK a request (a key names one request: with one, the
        file goes whole, one retryable unit)."""
        whole = self.options["idempotency_key"] is not None
        while self.pending:
            size = len(self.pending) if whole else FILE_CHUNK
            batch, self.pending = self.pending[:size], self.pending[size:]
            answer = self.send(batch)
            self.jobs += answer["jobs"]
            self.warnings += [w for w in answer.get("warnings", []) if w not in self.warnings]

    def send(self, items: list[JobsFileItem]) -> SubmitAnswer:
        """One all-or-nothing request for ``items``; an item the daemon refuses becomes an
        error on its line and the others are sent again."""
        while items:
            try:
                return self.c.submit_full([i.data for i in items], **self.options)
            except InvalidSpec as e:
                m = JOB_ITEM.match(str(e))
                n = int(m.group(1)) if m else 0
                if (m is None and len(items) > 1) or n >= len(items):
                    raise
                refused = items[n]
                if not self.checked:  # from now on every item is checked here as well
                    self.checked = True
                    items = self._keep_good(items, everything=True)
                    self.pending = self._keep_good(self.pending, everything=True)
                    if not any(i is refused for i in items):
                        continue  # wrong as a spec: an error of its own now
                items = [i for i in items if i is not refused]
                self.errors.append(JobsFileError(
                    refused.line, str(e)[m.end():] if m else str(e), self.source))
        return {"jobs": []}

    def _keep_good(self, items: list[JobsFileItem], *, everything: bool,
                   ) -> list[JobsFileItem]:
        """``items`` without those the spec model refuses (each becomes an error); unless
        ``everything``, only the items JSON cannot carry as they are are checked."""
        if not everything and all(_plain(i.data) for i in items):
            return items
        good = []
        for item in items:
            checked = item.check() if everything or not _plain(item.data) else None
            if isinstance(checked, JobsFileError):
                self.errors.append(replace(checked, source=self.source))
            else:
                good.append(item)
        return good


def _plain(value: Any) -> bool:
    """Whether JSON carries ``value`` unchanged (YAML also gives dates, sets, bytes, ...)."""
    if value is None or isinstance(value, str | bool | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False
