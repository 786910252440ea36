"""`rota metrics` at 80 and 60 columns (issue 38): every number is printed whole; the trend
gives up its room first."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest
from tests.ml.trainer_logs import fixture


def cli(daemon: Any, *args: str, columns: int) -> subprocess.CompletedProcess[str]:
    """`rota ARGS` as a user runs it, its output a pipe COLUMNS wide."""
    env = {**os.environ, **daemon.env, "COLUMNS": str(columns)}
    return subprocess.run([sys.executable, "-m", "rota", *args], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def trained(daemon: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any]]:
    """A job whose output is a real Hugging Face Trainer run's (captured in tests/ml)."""
    log = tmp_path_factory.mktemp("hf") / "trainer.log"
    log.write_bytes(fixture("hf_trainer_4.57.6.log"))
    r = cli(daemon, "submit", "--json", "--gpus", "0", "--", "cat", str(log), columns=250)
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["jobs"][0]["id"]
    assert daemon.client.wait(job_id, timeout=60)["state"] == "completed"
    data = json.loads(cli(daemon, "metrics", str(job_id), "--json", columns=250).stdout)
    assert {"loss", "grad_norm", "learning_rate", "train_samples_per_second"} <= set(
        data["series"])
    return job_id, data


@pytest.mark.parametrize("columns", [80, 60])
def test_every_number_is_whole(daemon: Any, trained: tuple[int, dict[str, Any]],
                               columns: int) -> None:
    job_id, data = trained
    r = cli(daemon, "metrics", str(job_id), columns=columns)
    assert r.returncode == 0, r.stderr
    assert "…" not in r.stdout
    for line in r.stdout.splitlines():
        assert len(line) <= columns, f"{len(line)} > {columns}: {line!r}"
    words = set(re.split(r"[\s│┃,]+", r.stdout))
    for name, points in data["series"].items():
        values = [p[1] for p in points]
        for v in (values[-1], min(values), max(values)):
            assert f"{v:.6g}" in words, (name, v, r.stdout)
        assert str(points[-1][0]) in words and str(len(points)) in words


def test_the_trend_is_shown_where_there_is_room(daemon: Any,
                                                trained: tuple[int, dict[str, Any]]) -> None:
    job_id, _ = trained
    wide = cli(daemon, "metrics", str(job_id), columns=160).stdout
    assert "trend" in wide and "▁" in wide
    assert "trend" not in cli(daemon, "metrics", str(job_id), columns=80).stdout
