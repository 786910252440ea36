"""A round's record for the trackers (``python -m rota.pipeline.record``): its lineage and
numbers go to the MLflow run Rota opened for the job and, when asked, to a W&B run (here
offline: nothing leaves the machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROUND = {"pipeline": "tiny", "round": 2, "state": "rejected", "base_model": "/m/r1",
         "adapter": "/m/r2/adapter", "merged_model": "/m/r2/merged", "data_hash": "abc",
         "chunk": 1, "chunks": 3, "remote_task": None, "reason": "rejected: worse",
         "metric": 1.6, "base_metric": 1.25, "accepted": 0}


def record(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rota.pipeline.record"],
                          env={**os.environ, "ROTA_PIPELINE_ROUND": json.dumps(ROUND), **env},
                          capture_output=True, text=True, timeout=300, check=False)


def test_the_lineage_goes_to_the_mlflow_run_rota_opened(tmp_path: Path) -> None:
    mlflow = pytest.importorskip("mlflow")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    run = mlflow.MlflowClient(uri).create_run(
        mlflow.MlflowClient(uri).create_experiment("pipes")).info.run_id
    r = record({"MLFLOW_TRACKING_URI": uri, "MLFLOW_RUN_ID": run})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[0]) == {
        "metric": 1.6, "base_metric": 1.25, "accepted": 0.0}
    got = mlflow.MlflowClient(uri).get_run(run).data
    assert (got.params["round"], got.params["state"], got.params["merged_model"]) == (
        "2", "rejected", "/m/r2/merged")
    assert got.tags["rota.verdict"] == "rejected" and got.metrics["metric"] == 1.6


def test_and_to_wandb_when_asked(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    r = record({"WANDB_PROJECT": "refresh", "WANDB_MODE": "offline",
                "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true"})
    assert r.returncode == 0, r.stderr
    [run] = list((tmp_path / "wandb").glob("offline-run-*"))
    [records] = run.glob("run-*.wandb")  # W&B's own record file (protobuf)
    data = records.read_bytes()
    for text in (b"merged_model", b"/m/r2/merged", b"rejected", b"base_metric",
                 b"tiny-round-2", b"refresh"):
        assert text in data, text
