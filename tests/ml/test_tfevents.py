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
