"""Finding checkpoints, telling complete ones from ones being written, and the newest.

Checkpoint files here are real containers of the formats trainers write: a zip archive
(what ``torch.save`` and Lightning write; tests/ml/test_checkpoint_formats.py uses torch
itself) and ``.safetensors`` built by its published layout."""

from __future__ import annotations

import io
import json
import os
import struct
import tarfile
import zipfile
from pathlib import Path

import pytest

from rota.ml import checkpoint_layouts
from rota.ml.checkpoints import (
    SETTLE_S,
    find,
    newest_valid,
    of_job,
    step_of,
    tar_stream,
)

NOW = 1_000_000.0


def make(path: Path, data: bytes = b"w" * 10, age: float = 60.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (NOW - age, NOW - age))
    return path


def torch_zip(step: int = 0) -> bytes:
    """A zip archive laid out like a ``torch.save`` file."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00." + str(step).encode())
        z.writestr("archive/data/0", os.urandom(4096))
        z.writestr("archive/version", b"3\n")
    return buf.getvalue()


def safetensors(n_floats: int = 64) -> bytes:
    """A ``.safetensors`` file: 8-byte header length, JSON header, then the tensor bytes."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [n_floats],
                               "data_offsets": [0, 4 * n_floats]},
                         "__metadata__": {"format": "pt"}}).encode()
    return struct.pack("<Q", len(header)) + header + b"\0" * (4 * n_floats)


def hf_folder(path: Path, *, state: bool = True, weights: bytes | None = None,
              age: float = 60.0) -> Path:
    """A Hugging Face Trainer ``checkpoint-N`` folder."""
    make(path / "model.safetensors", safetensors() if weights is None else weights, age=age)
    make(path / "optimizer.pt", torch_zip(), age=age)
    make(path / "training_args.bin", torch_zip(), age=age)
    if state:
        make(path / "trainer_state.json", b'{"global_step": 1}', age=age)
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
    make(out / "ckpt.pt", torch_zip())
    make(out / "epoch=0-step=100.ckpt", torch_zip())
    make(out / "model.safetensors", safetensors())
    hf_folder(out / "checkpoint-200")
    make(out / "notes.txt")
    make(out / "training_args.bin", torch_zip())  # goes with a checkpoint, is none
    make(out / "checkpoint-300" / "optimizer.pt")  # no weights, no trainer_state: incomplete
    os.utime(out / "checkpoint-300", (NOW - 60, NOW - 60))
    found = {Path(c.path).name: c for c in find("out", str(tmp_path), now=NOW)}
    assert set(found) == {"ckpt.pt", "epoch=0-step=100.ckpt", "model.safetensors",
                          "checkpoint-200", "checkpoint-300"}
    assert all(c.valid for name, c in found.items() if name != "checkpoint-300")
    assert found["checkpoint-200"].size == sum(
        f.stat().st_size for f in (out / "checkpoint-200").iterdir())
    assert not found["checkpoint-300"].valid
    best = newest_valid(list(found.values()))
    assert best is not None and Path(best.path).name == "checkpoint-200"


def test_a_file_of_no_known_format_counts_once_left_alone(tmp_path: Path) -> None:
    make(tmp_path / "a" / "step_10.pt")
    make(tmp_path / "a" / "step_20.pt", age=SETTLE_S / 4)  # just written to
    make(tmp_path / "a" / "step_30.pt", data=b"")
    found = find(str(tmp_path / "a"), None, now=NOW)
    assert [(c.step, c.valid) for c in found] == [(10, True), (20, False), (30, False)]
    best = newest_valid(found)
    assert best is not None and best.step == 10


def test_a_complete_checkpoint_counts_at_once_and_requeue_and_resume_agree(
        tmp_path: Path) -> None:
    """The preempted job's case: it saved step 12 as it stopped and its retry started a
    moment later. The stop's record (read as if everything had settled) and the resume
    point (read now) must both name step 12, not the step 9 saved earlier."""
    make(tmp_path / "ckpt" / "ckpt_00009.pt", torch_zip(9), age=30)
    make(tmp_path / "ckpt" / "ckpt_00012.pt", torch_zip(12), age=0.2)
    for now in (NOW, NOW + SETTLE_S):  # the resume point's view, the requeue record's view
        best = newest_valid(of_job("ckpt", str(tmp_path), reported=None, since=NOW - 60,
                                   now=now))
        assert best is not None and best.path == str(tmp_path / "ckpt" / "ckpt_00012.pt")
    # what rota.job reported earlier (step 9) does not beat a complete later file
    told = {"path": str(tmp_path / "ckpt" / "ckpt_00009.pt"), "step": 9}
    best = newest_valid(of_job("ckpt", str(tmp_path), reported=told, since=NOW - 60, now=NOW))
    assert best is not None and best.step == 12


def test_a_file_still_being_written_never_wins(tmp_path: Path) -> None:
    whole = torch_zip(12)
    d = tmp_path / "ckpt"
    make(d / "ckpt_00009.pt", torch_zip(9))
    # the zip archive's last record is written last: without it the file is unfinished,
    # however long ago it was touched (a save killed half-way)
    growing = make(d / "ckpt_00012.pt", whole[: len(whole) // 2], age=120)
    short_st = make(d / "w_00011.safetensors", safetensors()[:-16], age=120)
    found = {c.step: c for c in find("ckpt", str(tmp_path), now=NOW)}
    assert (found[9].valid, found[11].valid, found[12].valid) == (True, False, False)
    best = newest_valid(list(found.values()))
    assert best is not None and best.step == 9
    # it grows to the end: now it is the one
    with open(growing, "ab") as f:
        f.write(whole[len(whole) // 2:])
    short_st.write_bytes(safetensors())
    found = {c.step: c for c in find("ckpt", str(tmp_path), now=NOW)}
    assert (found[11].valid, found[12].valid) == (True, True)
    best = newest_valid(list(found.values()))
    assert best is not None and best.step == 12
    # even a report by the job does not make a file cut short valid
    growing.write_bytes(whole[:100])
    told = find(None, None, now=NOW, reported=[(str(growing), 12)])
    assert [(c.step, c.valid) for c in told] == [(12, False)]


def test_a_trainer_folder_needs_its_completion_marker_and_whole_weights(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    hf_folder(out / "checkpoint-500")
    hf_folder(out / "checkpoint-1000", state=False)  # trainer_state.json not written yet
    hf_folder(out / "checkpoint-1500", weights=safetensors()[:40])  # weights cut short
    found = {c.step: c.valid for c in find("out", str(tmp_path), now=NOW)}
    assert found == {500: True, 1000: False, 1500: False}
    best = newest_valid(find("out", str(tmp_path), now=NOW))
    assert best is not None and best.step == 500
    # the marker arrives: complete at once, no settling wait
    make(out / "checkpoint-1000" / "trainer_state.json", b"{}", age=0.0)
    best = newest_valid(find("out", str(tmp_path), now=NOW))
    assert best is not None and best.step == 1000


def test_temporary_names_are_never_valid(tmp_path: Path) -> None:
    d = tmp_path / "ckpt"
    make(d / "ckpt_00005.pt", torch_zip(5))
    make(d / "tmp_ckpt_00009.pt", torch_zip(9))
    make(d / ".ckpt_00010.pt", torch_zip(10))
    make(d / "ckpt_00011.pt.tmp", torch_zip(11))
    make(d / "ckpt_00012.pt.partial", torch_zip(12))
    hf_folder(d / "tmp-checkpoint-13")
    found = {c.step: c.valid for c in find("ckpt/*", str(tmp_path), now=NOW)}
    assert found == {5: True, 9: False, 11: False, 12: False, 13: False}
    best = newest_valid(find("ckpt/*", str(tmp_path), now=NOW))
    assert best is not None and best.step == 5
    # a hidden file is listed only when a glob asks for it, and is not valid then either
    assert [(c.step, c.valid) for c in find("ckpt/.ckpt_*", str(tmp_path), now=NOW)] == \
        [(10, False)]
    best = newest_valid(find("ckpt", str(tmp_path), now=NOW))
    assert best is not None and best.step == 5


def test_the_highest_step_wins_over_name_order_and_time(tmp_path: Path) -> None:
    d = tmp_path / "ckpt"
    make(d / "ckpt-12.pt", torch_zip(12), age=50)  # older, and before "ckpt-9" by name
    make(d / "ckpt-9.pt", torch_zip(9), age=5)
    make(d / "last.ckpt", torch_zip(), age=1)  # no step: after every numbered one
    hf_folder(tmp_path / "out" / "checkpoint-1000", age=90)
    hf_folder(tmp_path / "out" / "checkpoint-500", age=10)
    best = newest_valid(find("ckpt", str(tmp_path), now=NOW))
    assert best is not None and best.step == 12
    assert [c.step for c in find("ckpt", str(tmp_path), now=NOW)] == [9, 12, None]
    best = newest_valid(find("out", str(tmp_path), now=NOW))
    assert best is not None and Path(best.path).name == "checkpoint-1000"


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


def test_the_usual_layouts_are_found_without_a_checkpoint_dir(tmp_path: Path) -> None:
    hf_folder(tmp_path / "checkpoint-5")  # output_dir="."
    hf_folder(tmp_path / "out" / "checkpoint-500")  # output_dir="out"
    make(tmp_path / "out" / "training_args.bin", torch_zip())
    make(tmp_path / "out" / "model.safetensors", safetensors())  # the final model: no step
    make(tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "epoch=0-step=64.ckpt",
         torch_zip())
    make(tmp_path / "runs" / "lightning_logs" / "version_3" / "checkpoints"
         / "epoch=1-step=128.ckpt", torch_zip())
    make(tmp_path / "checkpoints" / "step_100.pt", torch_zip())
    make(tmp_path / "exp" / "ckpt" / "ckpt_00200.pt", torch_zip())
    # not where trainers put them: too deep, or no checkpoint layout
    hf_folder(tmp_path / "a" / "b" / "checkpoint-9000")
    make(tmp_path / "src" / "model_300.pt", torch_zip())
    make(tmp_path / ".cache" / "checkpoints" / "step_400.pt", torch_zip())
    found = {os.path.relpath(c.path, tmp_path): c for c in find(None, str(tmp_path), now=NOW)}
    assert set(found) == {
        "checkpoint-5", os.path.join("out", "checkpoint-500"),
        os.path.join("lightning_logs", "version_0", "checkpoints", "epoch=0-step=64.ckpt"),
        os.path.join("runs", "lightning_logs", "version_3", "checkpoints",
                     "epoch=1-step=128.ckpt"),
        os.path.join("checkpoints", "step_100.pt"), os.path.join("exp", "ckpt", "ckpt_00200.pt")}
    best = newest_valid(list(found.values()))
    assert best is not None and best.step == 500
    # a job's own: only what was written since it was submitted
    own = of_job(None, str(tmp_path), reported=None, since=NOW - 30, now=NOW)
    assert own == []
    hf_folder(tmp_path / "out" / "checkpoint-600", age=5)
    own = of_job(None, str(tmp_path), reported=None, since=NOW - 30, now=NOW)
    assert [Path(c.path).name for c in own] == ["checkpoint-600"]


def test_the_look_for_layouts_is_bounded(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint_layouts, "MAX_ENTRIES", 20)
    monkeypatch.setattr(checkpoint_layouts, "MAX_SUBDIRS", 3)
    for i in range(40):
        hf_folder(tmp_path / "sweep" / f"checkpoint-{i}")
    for i in range(6):  # the most recently changed sub-folders are looked into first
        hf_folder(tmp_path / f"run{i}" / "checkpoint-1")
        os.utime(tmp_path / f"run{i}", (NOW - 100 + i, NOW - 100 + i))
    os.utime(tmp_path / "sweep", (NOW - 1000, NOW - 1000))
    found = [os.path.relpath(c.path, tmp_path) for c in find(None, str(tmp_path), now=NOW)]
    assert sorted(found) == [os.path.join(f"run{i}", "checkpoint-1") for i in (3, 4, 5)]
    os.utime(tmp_path / "sweep", (NOW, NOW))
    found = [c.path for c in find(None, str(tmp_path), now=NOW)]
    assert 0 < sum("sweep" in p for p in found) <= 20


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
