"""rota.ml.wandb_card: the environment the daemon gives the process that adds a job's card
to its W&B run, where that run's folder goes, and the process itself (real wandb, offline;
on a real daemon: tests/integration/test_trackers.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rota.ml import wandb_card
from rota.ml.wandb_card import environment, is_disabled, is_offline, wandb_dir

ROTA = {"WANDB_RUN_ID": "rota-abc-7", "WANDB_RESUME": "allow", "WANDB_PROJECT": "proj",
        "WANDB_NAME": "job-7", "WANDB_API_KEY": "k" * 40}


def test_online_the_run_is_written_in_the_private_folder() -> None:
    assert wandb_dir({}, offline_dir=None, cwd="/w", private="/tmp/p") == "/tmp/p"
    assert wandb_dir({"WANDB_MODE": "online"}, offline_dir="/w/wandb/offline-run-x",
                     cwd="/w", private="/tmp/p") == "/tmp/p"


@pytest.mark.parametrize(("env", "offline_dir", "expected"), [
    ({}, "/data/runs/wandb/offline-run-20260101_000000-rota-abc-7", "/data/runs"),
    ({}, "wandb/offline-run-20260101_000000-rota-abc-7", "/w"),  # as the job's cwd saw it
    ({"WANDB_DIR": "/data/runs"}, None, "/data/runs"),  # its hint not read: its own setting
    ({"WANDB_DIR": "out"}, None, "/w/out"),
    ({}, None, "/w/."),  # wandb's default: the cwd
])
def test_offline_the_run_is_written_beside_the_jobs(env: dict[str, str],
                                                    offline_dir: str | None,
                                                    expected: str) -> None:
    env = {"WANDB_MODE": "offline", **env}
    assert wandb_dir(env, offline_dir=offline_dir, cwd="/w", private="/tmp/p") == expected


def test_the_environment_is_wandbs_only_with_rotas_names_over_the_jobs() -> None:
    job = {"WANDB_MODE": "offline", "WANDB_BASE_URL": "https://wandb.lab", "WANDB_DIR": "out",
           "WANDB_CONSOLE": "wrap", "WANDB_PROJECT": "mine", "HF_TOKEN": "hf_x",
           "PATH": "/job/bin", "LD_PRELOAD": "/x.so"}
    env = environment(job, {**ROTA, "MLFLOW_RUN_ID": "r1"}, offline_dir=None, cwd="/w",
                      private="/tmp/p", home="/home/ann", path="/usr/bin:/bin")
    assert env == {**ROTA, "WANDB_MODE": "offline", "WANDB_BASE_URL": "https://wandb.lab",
                   "WANDB_DIR": "/w/out", "WANDB_SILENT": "true", "HOME": "/home/ann",
                   "PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}


def test_an_offline_run_named_by_its_output_makes_the_card_run_offline() -> None:
    env = environment({}, ROTA, offline_dir="/w/wandb/offline-run-x", cwd="/w",
                      private="/tmp/p", home="/h", path="/bin")
    assert env["WANDB_MODE"] == "offline" and env["WANDB_DIR"] == "/w"


def test_modes() -> None:
    assert is_offline({"WANDB_MODE": "dryrun"}) and not is_offline({"WANDB_MODE": "online"})
    assert is_disabled({"WANDB_MODE": "disabled"}) and is_disabled({"WANDB_DISABLED": "true"})
    assert not is_disabled({"WANDB_MODE": "offline"})


def card_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "card" / wandb_card.FOLDER
    folder.mkdir(parents=True)
    for name, text in {"card.md": "# wb-run\n", "card.html": "<h1>wb-run</h1>",
                       "loss.svg": "<svg/>"}.items():
        (folder / name).write_text(text)
    return folder.parent


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    source = Path(wandb_card.__file__).read_text()  # as the daemon runs it
    return subprocess.run([sys.executable, "-I", "-c", source, *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_bad_calls_say_why_in_one_line(tmp_path: Path) -> None:
    base = {"PATH": os.defpath, "HOME": str(tmp_path)}
    r = run([str(tmp_path)], {**base, "WANDB_RUN_ID": "rota-abc-7"})
    assert r.returncode == 2 and r.stderr == f"{wandb_card.SAID}no card files in " \
        f"{tmp_path / wandb_card.FOLDER}\n"
    r = run([str(card_dir(tmp_path))], base)
    assert r.returncode == 2 and "WANDB_RUN_ID is not set" in r.stderr
    r = run([str(tmp_path), "--exit-code", "x"], base)
    assert r.returncode == 2 and "invalid int value" in r.stderr


def test_without_wandb_it_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb: ImportError
    monkeypatch.setenv("WANDB_RUN_ID", "rota-abc-7")
    assert wandb_card.main([str(card_dir(tmp_path))]) == 3
    assert capsys.readouterr().err.startswith(f"{wandb_card.SAID}wandb is not installed")


def test_offline_the_card_is_a_second_run_folder_of_the_same_run(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    env = environment({"WANDB_MODE": "offline"}, ROTA, offline_dir=None, cwd=str(tmp_path),
                      private="/nonexistent", home=str(tmp_path), path=os.defpath)
    r = run([str(card_dir(tmp_path)), "--exit-code", "1"], env)
    assert r.returncode == 0, r.stderr
    folder = Path(r.stdout.strip())
    assert folder.parent == tmp_path / "wandb" and folder.name.startswith("offline-run-")
    assert folder.name.endswith("-rota-abc-7") and (folder / "run-rota-abc-7.wandb").exists()
    saved = folder / "files" / wandb_card.FOLDER
    assert sorted(p.name for p in saved.iterdir()) == ["card.html", "card.md", "loss.svg"]
    assert not any(p.is_symlink() for p in saved.iterdir())  # CARD_DIR is removed after
    assert (saved / "card.md").read_text() == "# wb-run\n"
