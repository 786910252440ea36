"""The collector (rota.storage.collect) read back by the daemon's side (artifacts.receive):
what a job's output folders hold arrives byte-equal, links and special files are passed
over with a note, and a stream that breaks its own rules is refused."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rota.core.spec import JobSpec
from rota.errors import StorageError
from rota.server.storage.artifacts import _COLLECTOR, receive, sources_of


def collect(*pairs: str) -> bytes:
    """The collector run as the daemon runs it: ``python -I -S -c SOURCE NAME=PATH...``."""
    out = subprocess.run([sys.executable, "-I", "-S", "-c", _COLLECTOR, *pairs],
                         capture_output=True, check=True)
    return out.stdout


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


def test_folders_arrive_byte_equal_and_links_are_not_followed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "sub" / "deeper").mkdir(parents=True)
    (out / "a.txt").write_text("hello\n")
    (out / "empty").write_bytes(b"")
    (out / "sub" / "b.bin").write_bytes(os.urandom(3 * (1 << 20) + 17))  # > one chunk
    (out / "sub" / "deeper" / "c").write_bytes(b"\x00\xff" * 10)
    secret = tmp_path / "secret.txt"
    secret.write_text("not the job's to save")
    (out / "link").symlink_to(secret)
    (out / "dirlink").symlink_to(tmp_path)
    os.mkfifo(out / "fifo")
    ckpt = tmp_path / "ckpt.pt"
    ckpt.write_bytes(b"weights")

    staged = tmp_path / "staged"
    staged.mkdir()
    notes = receive(io.BytesIO(collect(f"out={out}", f"checkpoint={ckpt}",
                                       f"gone={tmp_path / 'missing'}")),
                    staged, limit=1 << 30)

    want = {f"out/{k}": v for k, v in tree(out).items()} | {"checkpoint/ckpt.pt": b"weights"}
    assert tree(staged) == want
    assert "out/link: a link, not followed" in notes
    assert "out/dirlink: a link, not followed" in notes
    assert "out/fifo: not a regular file" in notes
    assert any(n.startswith("gone: ") and "is not there" in n for n in notes)
    assert not any(b"not the job's" in v for v in tree(staged).values())


def test_outputs_past_the_limit_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "big").write_bytes(b"x" * 5000)
    with pytest.raises(StorageError, match="max_output_bytes"):
        receive(io.BytesIO(collect(f"out={out}")), tmp_path / "staged", limit=4096)


@pytest.mark.parametrize(("stream", "why"), [
    (b"F 9\n../escape" + b"C 1\nx" + b"E\n", ".."),  # a path climbing out of the staging
    (b"F 5\n/abso" + b"E\n", "absolute|relative"),
    (b"C 1\nx", "outside a file"),
    (b"F 1\na" + b"C 5\nab", "cut short"),
    (b"F 1\na" + b"C 1\na", "middle of a file"),
    (b"Q 1\na", "unknown kind"),
    (b"F x\na", "bad record"),
])
def test_a_stream_that_breaks_the_rules_is_refused(tmp_path: Path, stream: bytes,
                                                   why: str) -> None:
    staged = tmp_path / "staged"
    staged.mkdir()
    with pytest.raises(StorageError, match=why):
        receive(io.BytesIO(stream), staged, limit=1 << 20)
    assert not (tmp_path / "escape").exists()


def test_output_names_follow_the_cwd_and_never_collide() -> None:
    spec = JobSpec(command=["x"], outputs=["out", "results/eval", "/data/out", "../other"])
    assert sources_of(spec, "/work/run") == {
        "out": "/work/run/out", "results/eval": "/work/run/results/eval",
        "out-2": "/data/out", "other": "/work/other"}
    # the newest checkpoint is saved apart unless an output folder holds it already
    spec = JobSpec(command=["x"], outputs=["ckpts"])
    assert "checkpoint" not in sources_of(spec, "/w", "ckpts/step-10")
    assert sources_of(spec, "/w", "/elsewhere/step-10")["checkpoint"] == "/elsewhere/step-10"
