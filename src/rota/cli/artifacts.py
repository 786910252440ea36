"""Where a job's data lives, from the command line: `rota artifacts JOB` and `rota
artifacts get JOB [PATH]` (what its ``outputs`` saved, brought here and checked against
its sha256), `rota share-link` (links that need no account) and `rota workspace`."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tarfile
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import IO, TYPE_CHECKING

import typer

from rota.cli.common import client, emit, run_cli
from rota.cli.fmt import fmt_time
from rota.cli.job_refs import resolve
from rota.cli.user_text import cell, prose
from rota.errors import InvalidSpec, StorageError
from rota.units import format_memory, parse_duration, parse_memory

if TYPE_CHECKING:
    from rota.answers import (
        ArtifactsAnswer,
        CleanupDoneAnswer,
        CleanupPlanAnswer,
        ShareLinkAnswer,
        ShareLinksAnswer,
        WorkspacesAnswer,
        WorkspaceSyncAnswer,
    )
    from rota.client import RawClient

#: the most `rota workspace clean --days` the daemon takes (100 years; its API's bound)
MAX_DAYS = 36_500


def artifacts_text(data: ArtifactsAnswer) -> str:
    head = f"job {data['id']}: outputs {data['state']}"
    if data["state"] == "saved":
        head += (f", {len(data['files'])} files, {format_memory(data['bytes'] or 0)}, "
                 f"at {fmt_time(data['saved_at'], short=True)} to {data['store']}")
    elif data["state"] == "pending":
        head += " (saved once the daemon has read them: `rota artifacts` again)"
    lines = [head]
    if data["error"]:
        lines.append(f"  {'why' if data['state'] == 'failed' else 'last trouble'}: "
                     f"{data['error']}")
    paths = [cell(f["path"]) for f in data["files"]]  # a file's name may hold a newline
    width = max(map(len, paths), default=0)
    for f, path in zip(data["files"], paths, strict=True):
        lines.append(f"  {path:<{width}}  {format_memory(f['size']):>6}  "
                     f"sha256:{f['sha256'][:16]}")
    lines += [f"  note: {n}" for n in data["notes"]]
    return "\n".join(lines)


def artifacts(
    first: str = typer.Argument(..., metavar="JOB | get",
                                help="a job (id or name), or `get` to download"),
    job: str = typer.Argument(None, metavar="[JOB]", help="with get: the job"),
    path: str = typer.Argument(None, metavar="[PATH]",
                               help="with get: one file or folder of the list (default: all)"),
    output: Path = typer.Option(None, "--output", "-o",
                                help="with get: where to (default: ./job-ID for all, the "
                                     "file's name for one file)"),
    force: bool = typer.Option(False, "--force", help="with get: replace existing files"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """A job's saved outputs (--output DIR), with sizes and sha256; `get` downloads them."""
    with run_cli(json_out=json_out), client() as c:
        if first != "get":
            if job is not None:
                raise InvalidSpec(f"unexpected {job!r}: `rota artifacts JOB` lists, "
                                  "`rota artifacts get JOB [PATH]` downloads", field="job")
            emit(c.artifacts(resolve(c, first)), json_out, artifacts_text)
            return
        if job is None:
            raise InvalidSpec("rota artifacts get JOB [PATH]: which job?", field="job")
        job_id = resolve(c, job)
        got = get(c, job_id, path, output, force=force)
        emit({"id": job_id, "files": got}, json_out,
             lambda d: "\n".join(f"{p}" for p in d["files"]) or "nothing to download")


def get(c: RawClient, job_id: int, path: str | None, output: Path | None, *,
        force: bool) -> list[str]:
    """Download the job's saved files (all, one, or those under a folder of the list):
    one file in one request, several as one tar stream; each is written aside and moved
    into place once its sha256 matches the list."""
    data = c.artifacts(job_id)
    if data["state"] != "saved":
        raise InvalidSpec(f"job {job_id}'s outputs are {data['state']}"
                          + (f": {data['error']}" if data["error"] else ""), field="job")
    listed = {f["path"]: f["sha256"] for f in data["files"]}
    wanted = path.strip("/") if path is not None else None
    if wanted is not None and wanted in listed:  # one file: to its name here, or to -o
        target = output or Path(os.path.basename(wanted))
        _refuse_existing([target], force)
        _place(target, lambda f: c.download_artifact(job_id, wanted, f))
        return [str(target)]
    names = [p for p in listed if wanted is None or p.startswith(wanted + "/")]
    if not names:
        raise InvalidSpec(f"job {job_id} saved no file or folder {path!r}: "
                          f"`rota artifacts {job_id}` lists them", field="path")
    base = os.path.dirname(wanted) if wanted else ""
    root = output or Path(f"job-{job_id}")
    targets = {n: root / os.path.relpath(n, base or ".") for n in names}
    _refuse_existing(targets.values(), force)
    written: list[str] = []
    with c.artifact_archive(job_id, wanted) as stream, \
            tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            place = targets.get(member.name)
            reader = tar.extractfile(member) if member.isfile() else None
            if place is None or reader is None:
                raise StorageError(f"the daemon sent {member.name!r}, which is not one of "
                                   f"the files asked for")
            _place(place, partial(_copy_checked, reader, name=member.name,
                                  sha256=listed[member.name]))
            written.append(str(place))
    missing = len(names) - len(written)
    if missing:
        raise StorageError(f"the download ended {missing} file(s) short; the others are in "
                           f"{root}")
    return written


def _refuse_existing(targets: Iterable[Path], force: bool) -> None:
    if force:
        return
    for target in targets:
        if target.exists():
            raise InvalidSpec(f"{target} exists; --force replaces it", field="output")


def _place(target: Path, write: Callable[[IO[bytes]], object]) -> None:
    """``write`` into a file beside ``target``, moved onto it only when it succeeds."""
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f".{target.name}.part-{os.getpid()}")
    try:
        with part.open("wb") as f:
            write(f)
        os.replace(part, target)
    finally:
        part.unlink(missing_ok=True)


def _copy_checked(reader: IO[bytes], into: IO[bytes], *, name: str, sha256: str) -> None:
    digest = hashlib.sha256()
    while data := reader.read(1 << 20):
        digest.update(data)
        into.write(data)
    if digest.hexdigest() != sha256:
        raise StorageError(f"{name}: what arrived does not match its sha256 in the list")


def links_text(data: ShareLinksAnswer) -> str:
    if not data["links"]:
        return "no links"
    lines = []
    for link in data["links"]:
        state = ("revoked" if link["revoked_at"] else "expired" if not link["active"]
                 else f"until {fmt_time(link['expires_at'], short=True)}")
        lines.append(f"{link['id']:>5}  job {link['job']}  {link['path'] or '(all)'}  {state}"
                     f"  {link['downloads']} downloads  by {link['created_by']}")
    return "\n".join(lines)


def link_text(link: ShareLinkAnswer) -> str:
    until = fmt_time(link["expires_at"], short=True)
    if link["url"]:
        tail = ("anyone with it can download until then; S3 cannot revoke it sooner"
                if link["kind"] == "presigned"
                else f"`rota share-link revoke {link['id']}` stops it sooner")
        return f"{link['url']}\n  works until {until}: {tail}"
    return f"link {link['id']}: " + ("revoked" if link["revoked_at"] else f"until {until}")


def share_link(
    first: str = typer.Argument(..., metavar="JOB | list | revoke",
                                help="a job (id or name) to share; `list [JOB]` or "
                                     "`revoke ID`"),
    second: str = typer.Argument(None, metavar="[PATH | JOB | ID]",
                                 help="a file or folder of `rota artifacts JOB` (default: "
                                      "all); with list: a job; with revoke: the link"),
    expires: str = typer.Option("7d", "--expires", help="how long it works: 30m, 12h, 7d "
                                "(at most 30d; --presigned at most 7d)"),
    presigned: bool = typer.Option(False, "--presigned", help="a presigned URL of the S3 "
                                   "store, served by the bucket (one file; it cannot be "
                                   "revoked)"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """A link to a job's saved outputs for people without a Rota account (expires, revocable)."""
    with run_cli(json_out=json_out), client() as c:
        if first == "list":
            job = resolve(c, second) if second else None
            emit(c.share_links(job), json_out, links_text)
        elif first == "revoke":
            if second is None or not second.isdigit():
                raise InvalidSpec("rota share-link revoke ID: which link? (`rota share-link "
                                  "list` shows them)", field="id")
            emit(c.revoke_share_link(int(second)), json_out, link_text)
        else:
            seconds = parse_duration(expires, field="expires")
            emit(c.share_link(resolve(c, first), second, expires=seconds,
                              presigned=presigned), json_out, link_text)


def workspaces_text(data: WorkspacesAnswer) -> str:
    rows = data["workspaces"]
    if not rows:
        return (f"no workspaces yet: each user and project gets one at its first job "
                f"(quota {format_memory(data['default_quota'])} unless an admin sets one)")
    width = max(len(w["name"]) for w in rows)
    lines = []
    for w in rows:
        quota = format_memory(w["quota"])
        used = (f"not measured yet; quota {quota}" if w["bytes"] is None
                else f"{format_memory(w['bytes']):>8} of {quota}")
        lines.append(f"{w['name']:<{width}}  {used}"
                     + (" (its own)" if w["own_quota"] else "")
                     + ("  OVER: its jobs wait" if w["over"] else "") + f"  {w['path']}")
        if w["sync"] is not None:
            lines.append(" " * (width + 2) + sync_text(w["sync"]))
    return "\n".join(lines)


def sync_text(sync: WorkspaceSyncAnswer) -> str:
    """How this machine's copy stands with the bucket."""
    said = f"{sync['state']} ({sync['url']})"
    if sync["synced_at"] is not None:
        said += f", last synced {fmt_time(sync['synced_at'], short=True)}"
    if "error" in sync:
        said += f": {sync['error']} (tried again in {sync.get('retry_in', 0):.0f} s)"
    return said


def plan_text(data: CleanupPlanAnswer) -> str:
    head = (f"{data['count']} files ({format_memory(data['bytes'])}) in {data['workspace']} "
            f"untouched for {data['days']:g} days")
    if not data["count"]:
        return head + ": nothing to clean"
    lines = [head + f"; `rota workspace clean --apply {data['plan']}` removes these and "
             "nothing else (within the hour):"]
    lines += [f"  {f['path']}  {format_memory(f['size'])}  {fmt_time(f['mtime'], short=True)}"
              for f in data["files"]]
    if data["more"]:
        lines.append(f"  ... and {data['count'] - len(data['files'])} more (--json lists "
                     "the first 1,000)")
    return "\n".join(lines)


def done_text(data: CleanupDoneAnswer) -> str:
    lines = [f"removed {data['removed']} files ({format_memory(data['bytes'])}) from "
             f"{data['workspace']}"]
    lines += [f"  kept {k}" for k in data["kept"]]
    return "\n".join(lines)


def workspace(
    action: str = typer.Argument(None, metavar="[quota | clean]", help="quota: set a "
                                 "workspace's quota (admins); clean: list the files "
                                 "untouched for --days, then remove them with --apply"),
    name: str = typer.Argument(None, metavar="[USER/PROJECT]", help="which workspace "
                               "(PROJECT default: jobs without a project)"),
    size: str = typer.Argument(None, metavar="[SIZE|default]", help="with quota: e.g. 500G, "
                               "or default"),
    days: float = typer.Option(None, "--days", help="with clean: files untouched for this "
                               "many days (default: cleanup_days, 30)"),
    apply: str = typer.Option(None, "--apply", metavar="PLAN", help="with clean: remove what "
                              "that dry run listed (and nothing else)"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Your workspaces (an admin's: everyone's): size and quota; ROTA_WORKSPACE in jobs."""
    with run_cli(json_out=json_out), client() as c:
        if action is None:
            emit(c.workspaces(), json_out, workspaces_text)
            return
        if action == "clean":
            if apply is not None:
                emit(c.apply_cleanup(apply), json_out, done_text)
                return
            if name is None:
                raise InvalidSpec("rota workspace clean USER/PROJECT [--days N] lists; "
                                  "--apply PLAN removes", field="name")
            if days is not None and not 0 < days <= MAX_DAYS:  # the daemon's bounds
                raise InvalidSpec(f"--days must be more than 0 and at most {MAX_DAYS} "
                                  f"(a number of days, e.g. 30), not {days:g}", field="days")
            emit(c.clean_workspace(name, days), json_out, plan_text)
            return
        if action != "quota" or name is None or size is None:
            raise InvalidSpec("rota workspace [quota USER/PROJECT SIZE|default | clean "
                              "USER/PROJECT [--days N] [--apply PLAN]]", field="action")
        limit = None if size == "default" else parse_memory(size, field="size")
        emit(c.set_workspace_quota(name, limit), json_out,
             lambda w: workspaces_text({"workspaces": [w], "default_quota": w["quota"]}))


def card(
    job: str = typer.Argument(..., metavar="JOB", help="a job (id or name)"),
    html: bool = typer.Option(False, "--html", help="one HTML page with its loss curve"),
    output: Path = typer.Option(None, "--output", "-o", help="write it to this file"),
    json_out: bool = typer.Option(False, "--json", help="its facts as JSON (each metric's "
                                                        "last, min and max)"),
) -> None:
    """A job's model card and training report: command, settings, cost, metrics, outputs."""
    with run_cli(json_out=json_out), client() as c:
        if json_out and html:
            raise InvalidSpec("--json and --html: choose one", field="html")
        text = c.card(resolve(c, job), "json" if json_out else "html" if html else "markdown")
        if json_out and output is None:
            emit(json.loads(text), True, str)
            return
        if output is None:  # a terminal's copy: its text as words (-o writes it exact)
            sys.stdout.write(prose(text))
            return
        _place(output, lambda f: f.write(text.encode()))
        typer.echo(f"wrote {output}")


def register(app: typer.Typer) -> None:
    app.command()(artifacts)
    app.command("share-link")(share_link)
    app.command()(workspace)
    app.command()(card)
