"""Finding checkpoints, telling finished ones from ones being written, and the newest."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from rota.ml.checkpoints import SETTLE_S, find, newest_valid, step_of, tar_stream

NOW = 1_000_000.0


def make(path: Path, data: bytes = b"w" * 10, age: float = 60.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (NOW - age, NOW - age))
    return path


@pytest.mark.parametrize(("name", "step"), [
    ("checkpoint-500", 500), ("epoch=2-step=1000.ckpt", 1000), ("ckpt_00500.pt", 500),
    ("model-step12000.safetensors", 12000), ("iter_300.pth", 300), ("last.ckpt", None),
    ("ckpt.pt", None), ("model.safetensors", None), ("500.pt", 500), ("v2-final.pt", 2),
])
def test_step_from_the_name(name: str, step: int | None) -> None:
    assert step_of(name) == step


def test_a_directory_holds_the_usual_kinds(tmp_path: Path) -> None:
    out = tmp_path / "out"
    make(out / "ckpt.pt")
    make(out / "epoch=0-step=100.ckpt")
    make(out / "model.safetensors")
    make(out / "checkpoint-200" / "trainer_state.json", b"{}")
    make(out / "checkpoint-200" / "model.safetensors")
    make(out / "notes.txt")
    make(out / "checkpoint-300" / "optimizer.pt")  # no weights, no trainer_state: incomplete
    for d in ("checkpoint-200", "checkpoint-300"):
        os.utime(out / d, (NOW - 60, NOW - 60))
    found = {Path(c.path).name: c for c in find("out", str(tmp_path), now=NOW)}
    assert set(found) == {"ckpt.pt", "epoch=0-step=100.ckpt", "model.safetensors",
                          "checkpoint-200", "checkpoint-300"}
    assert found["checkpoint-200"].valid and found["checkpoint-200"].size == 12
    assert not found["checkpoint-300"].valid
    best = newest_valid(list(found.values()))
    assert best is not None and Path(best.path).name == "checkpoint-200"


def test_a_file_being_written_or_empty_is_not_valid(tmp_path: Path) -> None:
    make(tmp_path / "a" / "step_10.pt")
    make(tmp_path / "a" / "step_20.pt", age=SETTLE_S / 4)  # just written to
    make(tmp_path / "a" / "step_30.pt", data=b"")
    found = find(str(tmp_path / "a"), None, now=NOW)
    assert [(c.step, c.valid) for c in found] == [(10, True), (20, False), (30, False)]
    best = newest_valid(found)
    assert best is not None and best.step == 10


def test_globs_and_reported_checkpoints(tmp_path: Path) -> None:
    make(tmp_path / "runs" / "r1" / "ckpt-5.pt")
    make(tmp_path / "runs" / "r2" / "ckpt-7.pt")
    found = find("runs/*/ckpt-*.pt", str(tmp_path), now=NOW)
    assert [c.step for c in found] == [5, 7]
    # what rota.job reported counts even when just written, and needs no checkpoint_dir
    fresh = make(tmp_path / "elsewhere" / "latest.pt", age=0.0)
    only = find(None, None, now=NOW, reported=[(str(fresh), 9)])
    assert [(c.step, c.valid, c.reported) for c in only] == [(9, True, True)]
    assert find(None, None, now=NOW, reported=[("/nonexistent/x.pt", 1)]) == []
    assert find("missing-dir", str(tmp_path), now=NOW) == []


def test_a_directory_downloads_as_a_tar(tmp_path: Path) -> None:
    d = tmp_path / "checkpoint-9"
    make(d / "model.safetensors", b"m" * 3000)
    make(d / "sub" / "config.json", b"{}")
    (d / "link").symlink_to("/etc/passwd")
    data = b"".join(tar_stream(str(d), chunk=1024))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = sorted(tar.getnames())
        assert names == ["checkpoint-9/model.safetensors", "checkpoint-9/sub/config.json"]
        member = tar.extractfile("checkpoint-9/model.safetensors")
        assert member is not None and member.read() == b"m" * 3000
