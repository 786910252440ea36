"""`rota ... --help` is Typer's text the first time and the same text, from the cache, after."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROTA = "import sys; from rota.cli.main import app; sys.argv[0] = 'rota'; sys.exit(app())"
HOT_PATHS = [[], ["submit"], ["queue"], ["show"], ["why"], ["server", "stop"]]


def rota(args: list[str], cache: Path, home: Path, *, importtime: bool = False
         ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "ROTA_HOME": str(home),
           "COLUMNS": "100"}
    env.pop("NO_COLOR", None)
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run([sys.executable, *flags, "-c", ROTA, *args], env=env,
                          capture_output=True, text=True, timeout=60)


def entries(cache: Path) -> list[Path]:
    folder = cache / "rota" / "help"
    return sorted(folder.glob("*.json")) if folder.exists() else []


def loaded(importtime_stderr: str) -> set[str]:
    return {line.rsplit("|", 1)[-1].strip() for line in importtime_stderr.splitlines()
            if line.startswith("import time:")}


@pytest.mark.parametrize("path", HOT_PATHS, ids=lambda p: " ".join(p) or "rota")
def test_cached_help_is_typers_help(path: list[str], tmp_path: Path) -> None:
    first = rota([*path, "--help"], tmp_path / "cache", tmp_path)
    assert first.returncode == 0, first.stderr
    assert "Usage: rota" in first.stdout
    assert len(entries(tmp_path / "cache")) == 1
    second = rota([*path, "--help"], tmp_path / "cache", tmp_path, importtime=True)
    assert second.returncode == 0
    assert second.stdout == first.stdout
    assert "typer" not in loaded(second.stderr)  # it came from the cache


def test_a_changed_source_file_renders_again(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = rota(["queue", "--help"], cache, tmp_path)
    (entry,) = entries(cache)
    data = json.loads(entry.read_text())
    some_file = next(p for p in data["files"] if p.endswith("queue_view.py"))
    data["files"][some_file][0] -= 1  # as if queue_view.py had been edited since
    data["text"] = "stale\n"
    entry.write_text(json.dumps(data))
    again = rota(["queue", "--help"], cache, tmp_path, importtime=True)
    assert again.stdout == first.stdout
    assert "typer" in loaded(again.stderr)
    assert json.loads(entry.read_text())["text"] == first.stdout  # saved anew


def test_only_command_paths_are_saved(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    unknown = rota(["nosuch", "--help"], cache, tmp_path)
    assert unknown.returncode == 2
    # a job's own --help: `rota submit` runs it (here no daemon answers), never help
    job = rota(["submit", "train", "--help"], cache, tmp_path)
    assert job.returncode != 0
    assert "Usage:" not in job.stdout
    assert entries(cache) == []


def test_the_width_is_part_of_the_key(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    narrow = rota(["why", "--help"], cache, tmp_path)
    env_wide = {**os.environ, "XDG_CACHE_HOME": str(cache), "ROTA_HOME": str(tmp_path),
                "COLUMNS": "160"}
    wide = subprocess.run([sys.executable, "-c", ROTA, "why", "--help"], env=env_wide,
                          capture_output=True, text=True, timeout=60)
    assert max(map(len, wide.stdout.splitlines())) > 100
    assert max(map(len, narrow.stdout.splitlines())) <= 100
    assert len(entries(cache)) == 2
