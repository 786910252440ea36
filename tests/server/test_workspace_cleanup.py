"""A cleanup's removal cannot be steered outside its workspace: a folder of a listed path
swapped for a link to elsewhere after the dry run keeps that file (and what the link
points at) untouched."""

from __future__ import annotations

import os
import time
from pathlib import Path

from rota.server.storage.workspace_cleanup import remove_listed, stale_files


def test_a_folder_swapped_for_a_link_after_the_dry_run_steers_nothing(tmp_path: Path) -> None:
    ws, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    (ws / "sub").mkdir(parents=True)
    elsewhere.mkdir()
    old = time.time() - 90 * 86400
    for folder in (ws / "sub", elsewhere):
        (folder / "victim.txt").write_text("keep me")
        os.utime(folder / "victim.txt", (old, old))
    (ws / "plain.txt").write_text("stale")
    os.utime(ws / "plain.txt", (old, old))

    plan = stale_files(ws, time.time() - 30 * 86400)
    assert [f.path for f in plan] == ["plain.txt", "sub/victim.txt"]
    # between the dry run and its apply, sub/ becomes a link to a folder outside
    (ws / "sub" / "victim.txt").unlink()
    (ws / "sub").rmdir()
    (ws / "sub").symlink_to(elsewhere)
    os.utime(elsewhere / "victim.txt", (old, old))  # the same name, size and age

    removed, kept = remove_listed(ws, plan)
    assert removed == ["plain.txt"]
    assert kept == ["sub/victim.txt: a folder on its path is now a link or a file"]
    assert (elsewhere / "victim.txt").read_text() == "keep me"
