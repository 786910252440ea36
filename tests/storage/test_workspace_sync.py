"""A folder kept in step with an S3 prefix (rota.storage.sync), on a real S3-protocol
server (moto's): down then up round trips byte-equal (nested folders, empty files, a
multipart file), nothing unchanged is sent twice, deletions cross over only for files the
index knew, links are neither uploaded nor followed, and a file changed on both sides is
never lost.

Skipped without boto3 and moto unless the run requires them (ROTA_REQUIRE_TORCH)."""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rota.storage.sync import conflict_name, sync_down, sync_up
from rota.storage.sync_index import load_index, save_index
from rota.storage.sync_remote import Remote
from rota_testing import moto_s3, s3_client

BUCKET = "rota-workspaces"
NOON = 1_795_953_600.0  # 2026-11-29 12:00:00 UTC: conflict copies are named by the time
BIG = random.Random(3).randbytes(2 * (1 << 20) + 5)  # over the multipart threshold
FILES = {"a.txt": b"hello\n", "empty": b"", "sub/deeper/c.json": b'{"x": 1}',
         "sub/b.bin": bytes(range(256)) * 40, ".hidden": b"dot", "big.bin": BIG}


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    yield from moto_s3(tmp_path_factory, BUCKET)


@pytest.fixture
def s3(aws: dict[str, str]) -> Any:
    return s3_client(aws)


@pytest.fixture
def remote(s3: Any) -> Remote:
    return Remote(s3, BUCKET, f"ws/{uuid.uuid4().hex}/alice/vision")


def write(folder: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def files_under(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


def objects(s3: Any, remote: Remote) -> dict[str, bytes]:
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET,
                                                             Prefix=remote.base):
        for o in page.get("Contents", []):
            body = s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
            out[o["Key"][len(remote.base):]] = body
    return out


def test_up_then_down_round_trips_byte_equal_as_plain_objects(
        tmp_path: Path, remote: Remote, s3: Any) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    write(here, FILES)
    (here / "empty-folder").mkdir()  # (no object stands for a folder)
    index: dict[str, Any] = {}
    got = sync_up(remote, here, index)
    assert got.uploaded == len(FILES) and got.downloaded == 0
    assert objects(s3, remote) == FILES  # plain objects: what `aws s3 cp` would find
    assert set(index) == set(FILES)

    other: dict[str, Any] = {}
    got = sync_down(remote, there, other, staging=tmp_path / "staging")
    assert got.downloaded == len(FILES)
    assert files_under(there) == FILES
    assert {k: (v.size, v.etag) for k, v in other.items()} \
        == {k: (v.size, v.etag) for k, v in index.items()}
    assert list((tmp_path / "staging").iterdir()) == []  # nothing left aside

    # and back: the other machine's changes come here
    write(there, {"sub/new.txt": b"from there"})
    (there / "a.txt").write_bytes(b"changed there\n")
    assert sync_up(remote, there, other).uploaded == 2
    got = sync_down(remote, here, index, staging=tmp_path / "staging")
    assert got.downloaded == 2
    assert files_under(here) == files_under(there)


def test_an_unchanged_file_is_not_transferred_again(tmp_path: Path, remote: Remote) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    write(here, FILES)
    index: dict[str, Any] = {}
    assert sync_up(remote, here, index).uploaded == len(FILES)
    assert sync_up(remote, here, index).transfers == 0
    assert sync_down(remote, here, index, staging=tmp_path / "st").transfers == 0

    other: dict[str, Any] = {}
    assert sync_down(remote, there, other, staging=tmp_path / "st").downloaded == len(FILES)
    assert sync_down(remote, there, other, staging=tmp_path / "st").transfers == 0
    assert sync_up(remote, there, other).transfers == 0  # what it brought is not sent back

    (here / "sub" / "b.bin").write_bytes(b"one change")
    got = sync_up(remote, here, index)
    assert (got.uploaded, got.downloaded) == (1, 0)
    got = sync_down(remote, there, other, staging=tmp_path / "st")
    assert (got.downloaded, got.uploaded) == (1, 0)
    assert (there / "sub" / "b.bin").read_bytes() == b"one change"


def test_the_index_lost_the_same_bytes_are_not_sent_again(
        tmp_path: Path, remote: Remote) -> None:
    here = tmp_path / "here"
    write(here, FILES)
    index: dict[str, Any] = {}
    sync_up(remote, here, index)
    again: dict[str, Any] = {}  # (a daemon killed before it saved its index)
    got = sync_up(remote, here, again)
    # each object's ETag told from the bytes (a single part's MD5; the multipart one's, of
    # 8 MiB parts, the MD5 of their MD5s): all found equal, nothing sent, nothing kept twice
    assert got.adopted == len(FILES) and got.uploaded == 0 and got.conflicts == []
    assert sync_down(remote, here, again, staging=tmp_path / "st").transfers == 0


def test_a_multipart_object_is_told_from_its_bytes_when_its_parts_are_the_usual_size(
        tmp_path: Path, remote: Remote, s3: Any) -> None:
    """An object of 3 parts of 8 MiB (Rota's, boto3's and the AWS CLI's size) is found equal
    to the file with no index; one sent in parts of another size cannot be told, and is
    replaced, not kept twice (nothing says the bucket's is another version)."""
    from boto3.s3.transfer import TransferConfig

    here = tmp_path / "here"
    data = random.Random(5).randbytes(17 << 20)
    write(here, {"ours.bin": data, "theirs.bin": data})
    sync_up(remote, here, {})
    s3.upload_file(str(here / "theirs.bin"), BUCKET, remote.key("theirs.bin"),
                   Config=TransferConfig(multipart_threshold=1 << 20,
                                         multipart_chunksize=5 << 20))
    assert s3.head_object(Bucket=BUCKET, Key=remote.key("ours.bin"))["ETag"].endswith('-3"')
    got = sync_up(remote, here, {})  # (the index lost)
    assert (got.adopted, got.uploaded, got.conflicts) == (1, 1, [])


def test_a_script_comes_back_executable(tmp_path: Path, remote: Remote, s3: Any) -> None:
    """A file's mode goes up as the object's ``mode`` metadata (rclone's form); one that was
    executable comes down executable (where readable), the others as any new file; an
    object another tool sent with no mode too. A big (multipart) one carries it as well."""
    here, there = tmp_path / "here", tmp_path / "there"
    write(here, {"run.sh": b"#!/bin/sh\necho hi\n", "notes.txt": b"plain", "big.bin": BIG})
    (here / "run.sh").chmod(0o750)
    (here / "big.bin").chmod(0o700)
    sync_up(remote, here, {})
    head = s3.head_object(Bucket=BUCKET, Key=remote.key("run.sh"))
    assert head["Metadata"] == {"mode": "0100750"}
    s3.put_object(Bucket=BUCKET, Key=remote.key("other.txt"), Body=b"x")  # no mode
    old = os.umask(0o022)
    try:
        sync_down(remote, there, {}, staging=tmp_path / "st")
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in there.iterdir()}
    assert modes == {"run.sh": 0o755, "big.bin": 0o755, "notes.txt": 0o644,
                     "other.txt": 0o644}


def test_deletions_cross_over_only_for_files_the_index_knew(
        tmp_path: Path, remote: Remote, s3: Any) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    write(here, {"keep.txt": b"k", "gone-here.txt": b"g", "gone-there.txt": b"t"})
    index: dict[str, Any] = {}
    sync_up(remote, here, index)
    other: dict[str, Any] = {}
    sync_down(remote, there, other, staging=tmp_path / "st")

    # removed here: its object goes at the next sync up, and the other copy follows
    (here / "gone-here.txt").unlink()
    got = sync_up(remote, here, index)
    assert got.removed_there == 1 and "gone-here.txt" not in objects(s3, remote)
    got = sync_down(remote, there, other, staging=tmp_path / "st")
    assert got.removed_here == 1 and not (there / "gone-here.txt").exists()

    # removed from the bucket (by `aws s3 rm`, another machine): the copy here follows
    s3.delete_object(Bucket=BUCKET, Key=remote.key("gone-there.txt"))
    got = sync_down(remote, here, index, staging=tmp_path / "st")
    assert got.removed_here == 1 and not (here / "gone-there.txt").exists()
    assert "gone-there.txt" not in index

    # a file the index never knew is not removed by a bucket that lacks it ...
    write(there, {"only-here.txt": b"mine"})
    assert sync_down(remote, there, other, staging=tmp_path / "st").removed_here == 1
    assert (there / "only-here.txt").read_bytes() == b"mine"  # (gone-there.txt went)
    # ... nor an object the index never knew by a folder that lacks it: it comes down
    s3.put_object(Bucket=BUCKET, Key=remote.key("only-there.txt"), Body=b"theirs")
    assert sync_up(remote, here, index).removed_there == 0
    assert "only-there.txt" in objects(s3, remote)
    sync_down(remote, here, index, staging=tmp_path / "st")
    assert (here / "only-there.txt").read_bytes() == b"theirs"


def test_links_are_neither_uploaded_nor_followed(tmp_path: Path, remote: Remote,
                                                 s3: Any) -> None:
    here = tmp_path / "here"
    outside = tmp_path / "outside"
    write(here, {"real.txt": b"real"})
    write(outside, {"secret.txt": b"not the workspace's"})
    (here / "link.txt").symlink_to(outside / "secret.txt")
    (here / "linked-folder").symlink_to(outside)
    os.mkfifo(here / "pipe")
    index: dict[str, Any] = {}
    got = sync_up(remote, here, index)
    assert got.uploaded == 1
    assert set(objects(s3, remote)) == {"real.txt"}
    assert any(s.startswith("link.txt: a link") for s in got.skipped)
    assert any(s.startswith("pipe: not a regular file") for s in got.skipped)

    # a download never goes through a link to a folder: an object "linked-folder/x"
    s3.put_object(Bucket=BUCKET, Key=remote.key("linked-folder/secret.txt"), Body=b"evil")
    got = sync_down(remote, here, index, staging=tmp_path / "st")
    assert got.downloaded == 0 and any("in the way" in s for s in got.skipped)
    assert (outside / "secret.txt").read_bytes() == b"not the workspace's"
    # nor replaces a link in place of a file
    s3.put_object(Bucket=BUCKET, Key=remote.key("link.txt"), Body=b"evil")
    sync_down(remote, here, index, staging=tmp_path / "st")
    assert (here / "link.txt").is_symlink()
    assert (outside / "secret.txt").read_bytes() == b"not the workspace's"


def test_a_file_changed_on_both_sides_keeps_this_copy_and_sends_it(
        tmp_path: Path, remote: Remote, s3: Any) -> None:
    here = tmp_path / "here"
    write(here, {"both.txt": b"v1", "gone-there-changed-here.txt": b"v1"})
    index: dict[str, Any] = {}
    sync_up(remote, here, index)
    s3.put_object(Bucket=BUCKET, Key=remote.key("both.txt"), Body=b"theirs, v2")
    s3.delete_object(Bucket=BUCKET, Key=remote.key("gone-there-changed-here.txt"))
    (here / "both.txt").write_bytes(b"mine, v2")
    (here / "gone-there-changed-here.txt").write_bytes(b"mine, v2")
    got = sync_down(remote, here, index, staging=tmp_path / "st")
    assert sorted(got.kept) == ["both.txt", "gone-there-changed-here.txt"]
    assert files_under(here) == {"both.txt": b"mine, v2",
                                 "gone-there-changed-here.txt": b"mine, v2"}
    theirs = s3.head_object(Bucket=BUCKET, Key=remote.key("both.txt"))["ETag"]
    up = sync_up(remote, here, index, now=NOON)
    # the bucket's version is kept beside this one, in the bucket, then brought here
    copy = f"both.sync-conflict-20261129-120000-{theirs.strip(chr(34))[:8]}.txt"
    assert up.conflicts == [("both.txt", copy)]
    assert objects(s3, remote) == {"both.txt": b"mine, v2", copy: b"theirs, v2",
                                   "gone-there-changed-here.txt": b"mine, v2"}
    assert sync_down(remote, here, index, staging=tmp_path / "st").downloaded == 1
    assert files_under(here) == objects(s3, remote)


def test_a_copy_sent_while_another_sent_its_own_loses_neither(
        tmp_path: Path, remote: Remote, s3: Any) -> None:
    """Two copies of one workspace (this machine's, a cluster job's) each change a file and
    send it, with no sync down between: the second sender keeps the first's version as a
    conflict copy; a file new on both sides (no index) too, unless the bytes are equal."""
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    write(mine, {"log/train.log": b"v1"})
    index_mine: dict[str, Any] = {}
    sync_up(remote, mine, index_mine)
    index_theirs: dict[str, Any] = {}
    sync_down(remote, theirs, index_theirs, staging=tmp_path / "st")
    write(theirs, {"log/train.log": b"v2 from the cluster", "new.txt": b"theirs",
                   "same.txt": b"equal"})
    sync_up(remote, theirs, index_theirs)
    write(mine, {"log/train.log": b"v2 from here", "new.txt": b"mine", "same.txt": b"equal"})
    up = sync_up(remote, mine, index_mine, now=NOON)
    assert sorted(rel for rel, _ in up.conflicts) == ["log/train.log", "new.txt"]
    assert up.adopted == 1  # same.txt: the same bytes, nothing kept twice
    got = objects(s3, remote)
    assert got["log/train.log"] == b"v2 from here" and got["new.txt"] == b"mine"
    copies = dict(up.conflicts)
    assert got[copies["log/train.log"]] == b"v2 from the cluster"
    assert got[copies["new.txt"]] == b"theirs"
    assert copies["log/train.log"].startswith("log/train.sync-conflict-20261129-120000-")
    assert len(got) == 5  # the three files and the two copies
    # the other copy brings this machine's version and the conflict copies
    sync_down(remote, theirs, index_theirs, staging=tmp_path / "st")
    assert files_under(theirs) == objects(s3, remote)


@pytest.mark.parametrize(("rel", "copy"), [
    ("a.txt", "a.sync-conflict-20261129-120000-0123abcd.txt"),
    ("sub/model.tar.gz", "sub/model.tar.sync-conflict-20261129-120000-0123abcd.gz"),
    ("Makefile", "Makefile.sync-conflict-20261129-120000-0123abcd"),
    ("dir/.env", "dir/.env.sync-conflict-20261129-120000-0123abcd")])
def test_a_conflict_copy_keeps_the_folder_and_the_extension(rel: str, copy: str) -> None:
    assert conflict_name(rel, '"0123abcdef-3"', NOON) == copy


def test_the_index_is_saved_and_read_back_and_a_damaged_one_counts_as_none(
        tmp_path: Path, remote: Remote) -> None:
    here = tmp_path / "here"
    write(here, {"a.txt": b"a"})
    index: dict[str, Any] = {}
    sync_up(remote, here, index)
    path = tmp_path / ".sync" / "alice" / "vision.json"
    save_index(path, index)
    assert load_index(path) == index
    assert load_index(tmp_path / "none.json") == {}
    path.write_text("{not json")
    assert load_index(path) == {}


def test_a_missing_bucket_is_a_clear_error(tmp_path: Path, s3: Any) -> None:
    from rota.errors import StorageError

    with pytest.raises(StorageError, match="NoSuchBucket"):
        sync_down(Remote(s3, "no-such-bucket", "ws/alice/default"), tmp_path / "w", {},
                  staging=tmp_path / "st")


# --- the daemon's side (rota.server.storage.workspace_sync): which jobs wait, no S3 needed -

class _Pool:
    """An executor that only records what it was given."""

    def __init__(self) -> None:
        self.given: list[tuple[Any, ...]] = []

    def submit(self, fn: Any, *args: Any) -> None:
        self.given.append(args)

    def shutdown(self, **_: Any) -> None:
        pass


def _run(job_id: int, user: str, project: str | None, engine: bool = False) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(job_id=job_id, user=user,
                           spec=SimpleNamespace(project=project, workspace=True),
                           backend=SimpleNamespace(capabilities=SimpleNamespace(engine=engine)))


def test_jobs_wait_for_a_workspace_not_current_here_looked_up_not_walked(
        tmp_path: Path) -> None:
    from rota.config import load_settings
    from rota.core.plan import ReasonCode
    from rota.core.schedule import schedule
    from rota.core.snapshot import GpuView, PendingJob, Policy, Snapshot
    from rota.server.storage.workspace_sync import FRESH_S, WorkspaceSync

    now = [1000.0]
    timers: list[Any] = []
    settings = load_settings(home=tmp_path, storage={"workspace_url": "s3://b/p"})
    sync = WorkspaceSync(settings, "s3://b/p", lambda: now[0], post=lambda *a: None,
                         kick=lambda: None, later=lambda delay, fn: timers.append(fn))
    pool = _Pool()
    sync._pool = pool  # type: ignore[assignment]
    jobs = {1: PendingJob(1, 0, 1, 0, user="alice", project="vision"),
            2: PendingJob(2, 0, 2, 0, user="bob"),
            3: PendingJob(3, 0, 3, 0, user="carol", pool="slurm")}

    def never_walked() -> list[int]:
        raise AssertionError("the queue was walked")

    def plan() -> Any:
        held = sync.held({}, jobs.get, never_walked)
        gpus = [GpuView(index=0, memory_total=24 << 30)]
        return schedule(Snapshot(gpus=gpus, pending=[jobs[1], jobs[2]], held=held),
                        Policy(), now[0])

    first = plan()
    assert first.starts == []
    why = first.reasons[1]
    assert why.code is ReasonCode.DATA
    assert why.message == ("waits for its workspace alice/vision to be brought from "
                           "s3://b/p/alice/vision (queued)")
    assert "bob/default to be brought from s3://b/p/bob/default" in first.reasons[2].message
    assert sync.held({}, jobs.get, never_walked).get(3) is None  # a cluster pool's: not here

    for fn in timers:  # the pump: one sync per workspace, each bringing it here
        fn()
    assert sorted((key, up, down) for key, up, down, _ in pool.given) \
        == [(("alice", "vision"), False, True), (("bob", "default"), False, True)]
    assert plan().reasons[1].message == ("waits for its workspace alice/vision to be "
                                         "brought from s3://b/p/alice/vision")  # under way
    sync._synced(("alice", "vision"), False, True, None, "brought: nothing to do")
    assert [s.job_id for s in plan().starts] == [1]  # bob's is still on its way

    # its job runs: current however long it takes; its end sends the workspace up
    sync.started([_run(1, "alice", "vision")])
    now[0] += 10 * FRESH_S
    assert sync.current(("alice", "vision"), now[0])
    sync.ended(1)
    assert not sync.current(("alice", "vision"), now[0])
    assert pool.given[-1][:3] == (("alice", "vision"), True, False)
    assert "being sent there first" in sync.held({}, jobs.get, never_walked)[1].message

    # a failed sync: the reason names the trouble, and it is tried again later
    from rota.errors import StorageError

    sync._synced(("alice", "vision"), True, False,
                 StorageError("s3://b/p/alice/vision: list: SlowDown: wait", passing=True),
                 "")
    got = sync.held({}, jobs.get, never_walked)[1].message
    assert got.endswith(": list: SlowDown: wait (tried again in 30 s)"), got
