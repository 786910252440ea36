"""Tracking's side of adding a job's card to its W&B run: the process it starts gets W&B's
variables and nothing of the daemon's, what it says never repeats the API key, and one
that hangs is stopped (real wandb: tests/ml/test_wandb_card.py and
tests/integration/test_trackers.py)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from rota.ml import wandb_card
from rota.server.tracking import trackers as tracking
from rota.server.tracking.trackers import Tracking, WandbCard

KEY = "s3cr3t" * 7
CARD = {"rota/card.md": "# wb-run\n", "rota/card.html": "<h1/>", "rota/loss.svg": "<svg/>"}


def attach(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, script: str,
           **job_env: str) -> tuple[bool, str]:
    """``script`` run in place of rota.ml.wandb_card; what came back to the loop."""
    monkeypatch.setattr(tracking, "_WANDB_CARD", textwrap.dedent(script))
    monkeypatch.setenv("DAEMON_ONLY", "x")
    came: list[tuple[Any, ...]] = []
    t = Tracking(cast(Any, SimpleNamespace()), cast(Any, None),
                 post=lambda fn, *args: came.append(args))
    wb = WandbCard(job_env={"WANDB_MODE": "online", "OTHER": "y", **job_env},
                   rota_env={"WANDB_RUN_ID": "rota-abc-7", "WANDB_API_KEY": KEY},
                   offline_dir=None, cwd=str(tmp_path), run_as=None, exit_code=1)
    t._attach_wandb(7, wb, CARD)
    (job_id, ok, said), = came
    assert job_id == 7
    return ok, said


def test_the_process_gets_wandbs_variables_and_the_card(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    seen = tmp_path / "seen.json"
    ok, said = attach(monkeypatch, tmp_path, f"""
        import json, os, sys
        card = sys.argv[1]
        files = sorted(os.path.relpath(os.path.join(d, f), card)
                       for d, _, fs in os.walk(card) for f in fs)
        with open({str(seen)!r}, "w") as f:
            json.dump({{"env": dict(os.environ), "argv": sys.argv[1:], "files": files}}, f)
        print(os.environ["WANDB_DIR"])
    """)
    got = json.loads(seen.read_text())
    assert set(got["env"]) == {"WANDB_MODE", "WANDB_RUN_ID", "WANDB_API_KEY", "WANDB_DIR",
                               "WANDB_SILENT", "HOME", "PATH", "LC_ALL"}
    assert got["env"]["WANDB_API_KEY"] == KEY  # through its environment only
    assert got["argv"][1:] == ["--exit-code", "1"]
    assert got["files"] == ["rota/card.html", "rota/card.md", "rota/loss.svg"]
    # online: a private folder, gone afterwards, as the card folder is
    assert ok and said == got["env"]["WANDB_DIR"] and not Path(said).exists()
    assert not Path(got["argv"][0]).exists()


def test_what_it_says_on_failure_never_repeats_the_key(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture
                                                       ) -> None:
    ok, said = attach(monkeypatch, tmp_path, f"""
        import os, sys
        print("wandb: some noise", file=sys.stderr)
        print({wandb_card.SAID!r} + "W&B: bad key " + os.environ["WANDB_API_KEY"],
              file=sys.stderr)
        print("wandb: more noise", file=sys.stderr)
        sys.exit(1)
    """)
    assert not ok and said == "W&B: bad key ***"
    assert KEY not in caplog.text and "bad key ***" in caplog.text


def test_one_that_hangs_is_stopped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(wandb_card, "TIMEOUT_S", 0.5)
    ok, said = attach(monkeypatch, tmp_path, "import time; time.sleep(60)")
    assert not ok and said == "it took over 0 s and was stopped"


def test_wandb_switched_off_in_the_job_gets_no_card(tmp_path: Path) -> None:
    t = Tracking(cast(Any, SimpleNamespace(wandb_entity=None, wandb_project=None)),
                 cast(Any, SimpleNamespace(launch_env=lambda spec, job_id: dict(spec.env),
                                           values=lambda user, names: {})),
                 post=lambda fn, *args: None)
    row = SimpleNamespace(spec={"command": ["true"], "wandb": True,
                                "env": {"WANDB_MODE": "disabled"}}, user="ann", progress=None)
    assert t._wandb_card(7, cast(Any, row), "completed") is None
    row.spec["env"] = {"WANDB_MODE": "offline"}
    row.progress = {"links": {"wandb": {"offline_dir": "/w/wandb/offline-run-x"}}}
    wb = t._wandb_card(7, cast(Any, row), "failed")
    assert wb is not None and wb.offline_dir == "/w/wandb/offline-run-x" and wb.exit_code == 1
    assert wb.rota_env["WANDB_RUN_ID"] == "rota--7"  # (no instance id in this test)
