"""Scalars from TensorBoard event files, read incrementally as a run writes them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from rota.ml import tfevents

try:
    from torch.utils.tensorboard import SummaryWriter
except ImportError:
    if os.environ.get("ROTA_REQUIRE_TORCH"):
        raise
    pytest.skip("needs torch and tensorboard (pip install 'rota[ml]')", allow_module_level=True)


def test_scalars_are_read_as_the_file_grows(tmp_path: Path) -> None:
    assert tfevents.available()
    w = SummaryWriter(str(tmp_path / "run1"))
    for step in range(5):
        w.add_scalar("train/loss", 1.0 / (step + 1), step)
    w.add_text("notes", "not a scalar", 0)
    w.flush()
    [path] = tfevents.event_files(str(tmp_path))
    got, offset = tfevents.read_scalars(path, 0)
    assert [(t, s) for t, s, _ in got] == [("train/loss", s) for s in range(5)]
    assert got[2][2] == pytest.approx(1 / 3)
    for step in range(5, 8):
        w.add_scalar("val/acc", step / 10, step)
    w.flush()
    more, offset2 = tfevents.read_scalars(path, offset)
    assert [(t, s) for t, s, _ in more] == [("val/acc", 5), ("val/acc", 6), ("val/acc", 7)]
    assert tfevents.read_scalars(path, offset2) == ([], offset2)
    w.close()


def test_a_record_still_being_written_waits(tmp_path: Path) -> None:
    w = SummaryWriter(str(tmp_path))
    for step in range(3):
        w.add_scalar("loss", float(step), step)
    w.close()
    [path] = tfevents.event_files(str(tmp_path))
    cut = tmp_path / "cut" / Path(path).name
    cut.parent.mkdir()
    shutil.copy(path, cut)
    with open(cut, "r+b") as f:  # the last record half written
        f.truncate(os.path.getsize(path) - 5)
    got, offset = tfevents.read_scalars(str(cut), 0)
    assert [s for _, s, _ in got] == [0, 1]
    with open(cut, "ab") as f:  # the writer finishes it
        f.write(Path(path).read_bytes()[os.path.getsize(path) - 5:])
    rest, _ = tfevents.read_scalars(str(cut), offset)
    assert [(t, s, v) for t, s, v in rest] == [("loss", 2, 2.0)]


def test_a_step_the_log_and_tensorboard_both_report_is_one_sample(tmp_path: Path) -> None:
    # nanoGPT-like: each step printed and written to TensorBoard under the same name
    from rota.ml.parse import LineParser
    from rota.server.tracking.outputs import OutputReader, Progress, events_path

    r = OutputReader(job_id=7, log_path=tmp_path / "7.log",
                     events_path=events_path(tmp_path / "7-1.json"), parser=LineParser([]),
                     progress=Progress.from_json(None, 1), tensorboard_dir=str(tmp_path / "tb"))
    w = SummaryWriter(str(tmp_path / "tb"))
    with open(r.log_path, "w") as f:
        for step in range(3):
            f.write(f"step {step}/10: loss={1 / (step + 1):.4f}\n")
            w.add_scalar("loss", 1 / (step + 1), step)
        f.write("step 2/10: loss=0.3333\n")  # the log saying it twice: its own business
    w.add_scalar("loss", 0.25, 3)  # only in TensorBoard: kept
    w.add_scalar("grad_norm", 0.5, 1)  # a name only TensorBoard gives: kept
    w.flush()
    r.read(1000.0)
    got = sorted((x["name"], x["step"]) for x in r.drain())
    assert got == [("grad_norm", 1), ("loss", 0), ("loss", 1), ("loss", 2), ("loss", 2),
                   ("loss", 3)]
    w.add_scalar("loss", 0.2, 4)
    w.flush()
    r.read(1001.0)  # TensorBoard's step 4 first this time
    assert [(x["name"], x["step"]) for x in r.drain()] == [("loss", 4)]
    with open(r.log_path, "a") as f:
        f.write("step 4/10: loss=0.2000\nstep 5/10: loss=0.1667\n")
    r.read(1002.0)  # the log's step 4 is dropped
    assert [(x["name"], x["step"]) for x in r.drain()] == [("loss", 5)]
    w.close()
