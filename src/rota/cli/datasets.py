"""`rota dataset add/list/show/rm`: datasets registered once, versioned by content, that
jobs name with `--dataset NAME[:VERSION]` (rota.server.storage.datasets)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from rota.cli.common import client, emit, run_cli
from rota.cli.fmt import fmt_time
from rota.core.spec import DATASET_REF_PARTS
from rota.errors import InvalidSpec
from rota.units import format_memory

if TYPE_CHECKING:
    from rota.answers import (
        DatasetAddAnswer,
        DatasetsAnswer,
        DatasetShowAnswer,
        DatasetsRemovedAnswer,
        DatasetVersionAnswer,
    )

dataset_app = typer.Typer(help="Datasets: registered once, versioned by content, fetched to "
                               "each machine before the jobs that name them start "
                               "(docs/storage.md).", no_args_is_help=True)

def split(given: str) -> tuple[str | None, str, str | None]:
    """(owner, name, version) of ``[OWNER/]NAME[:VERSION]``."""
    m = DATASET_REF_PARTS.match(given)
    if m is None:
        raise InvalidSpec(f"{given!r}: expected [OWNER/]NAME[:VERSION] (VERSION: vN, a "
                          "digest's first hex digits, or latest)", field="dataset")
    return m["owner"], m["name"], m["version"]


def _version_line(v: DatasetVersionAnswer) -> str:
    shared = "shared" if v["shared"] else "private"
    return (f"{v['ref']}  {v['files']} files, {format_memory(v['bytes'])}, {shared}, "
            f"sha256:{v['digest'][:12]}")


def added_text(data: DatasetAddAnswer) -> str:
    v = data["version"]
    if v is None:
        return "upload begun, not finished"
    head = "added" if data["made"] else "already there (same content)"
    return f"{head}: {_version_line(v)}\n  jobs read it with --dataset {v['ref']}"


def list_text(data: DatasetsAnswer) -> str:
    if not data["datasets"]:
        return "no datasets: `rota dataset add NAME PATH` registers one"
    lines = []
    for d in data["datasets"]:
        versions = ", ".join(f"v{n}" for n in d["versions"])
        cached = "  (on this machine)" if d["cached"] else ""
        lines.append(f"{d['owner']}/{d['name']}  latest v{d['version']} of {versions}: "
                     f"{d['files']} files, {format_memory(d['bytes'])}, "
                     f"{'shared' if d['shared'] else 'private'}{cached}")
        if d["description"]:
            lines.append(f"  {d['description']}")
    return "\n".join(lines)


def show_text(data: DatasetShowAnswer) -> str:
    lines = [_version_line(data),
             f"  added {fmt_time(data['created_at'], short=True)} by {data['created_by']} "
             f"from {data['source'] or '(not said)'}",
             f"  versions: {', '.join(f'v{n}' for n in data['versions'])}; "
             f"{'on this machine' if data['cached'] else 'not on this machine yet'}"]
    if data["description"]:
        lines.append(f"  {data['description']}")
    if not data["in_store"]:
        lines.append(f"  its files are missing from the store {data['store']}")
    width = max((len(f["path"]) for f in data["contents"]), default=0)
    shown = data["contents"][:200]
    lines += [f"  {f['path']:<{width}}  {format_memory(f['size']):>6}  "
              f"sha256:{f['sha256'][:16]}" for f in shown]
    if len(data["contents"]) > len(shown):
        lines.append(f"  ... and {len(data['contents']) - len(shown)} more files (--json)")
    if data["jobs"]:
        lines.append("  jobs: " + ", ".join(f"{j['id']} ({j['state']})" for j in data["jobs"]))
    return "\n".join(lines)


def removed_text(data: DatasetsRemovedAnswer) -> str:
    return "\n".join(f"removed {v['ref']}" for v in data["removed"])


class _Progress:
    """A bar on stderr while an upload runs (when stderr is a terminal)."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.task: Any = None

    def __call__(self, sent: int, total: int) -> None:
        if not sys.stderr.isatty():
            return
        if self.bar is None:
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )

            self.bar = Progress("uploading", BarColumn(), DownloadColumn(),
                                TransferSpeedColumn(), TimeRemainingColumn(), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("upload", total=total)
        self.bar.update(self.task, completed=sent)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@dataset_app.command("add")
def add(
    name: str = typer.Argument(..., help="the dataset's name (lower case, digits, . _ -)"),
    source: str = typer.Argument(..., metavar="PATH|s3://BUCKET/PREFIX",
                                 help="a folder or file here (uploaded), or an S3 prefix the "
                                      "daemon copies"),
    shared: bool = typer.Option(False, "--shared", help="every user may read it (default: "
                                "you and admins)"),
    description: str = typer.Option(None, "--description", "-m", help="a line about it"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Register a version of a dataset (the same content again is the same version)."""
    with run_cli(json_out=json_out), client() as c:
        if source.startswith("s3://"):
            answer = c.import_dataset(name, source, shared=shared, description=description)
        else:
            bar = _Progress()
            try:
                answer = c.add_dataset(name, Path(source), shared=shared,
                                       description=description, progress=bar)
            finally:
                bar.close()
        emit(answer, json_out, added_text)


@dataset_app.command("list")
def list_(json_out: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """The datasets you may read, with their latest version."""
    with run_cli(json_out=json_out), client() as c:
        emit(c.datasets(), json_out, list_text)


@dataset_app.command("show")
def show(
    dataset: str = typer.Argument(..., metavar="[OWNER/]NAME[:VERSION]"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """One version (the latest by default): its files, sizes, sha256 and the jobs that read it."""
    with run_cli(json_out=json_out), client() as c:
        owner, name, version = split(dataset)
        emit(c.dataset(name, owner=owner, version=version or "latest"), json_out, show_text)


@dataset_app.command("rm")
def rm(
    dataset: str = typer.Argument(..., metavar="[OWNER/]NAME[:VERSION]",
                                  help="without VERSION: every version"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Remove a version, or a whole dataset (refused while a job not ended reads it)."""
    with run_cli(json_out=json_out), client() as c:
        owner, name, version = split(dataset)
        emit(c.remove_dataset(name, owner=owner, version=version), json_out, removed_text)


def register(app: typer.Typer) -> None:
    app.add_typer(dataset_app, name="dataset")
