"""The pieces behind --mlflow, --wandb and stored secrets, without a daemon."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rota.core.spec import JobSpec, parse_spec
from rota.errors import InvalidSpec, NotFound, RotaError
from rota.ml import mlflow_bridge, wandb_bridge
from rota.ml.gitinfo import GitInfo, git_info, strip_credentials
from rota.server.access.secrets import Secrets
from rota.store.repo import Store


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), "-c", "user.email=t@e", "-c", "user.name=t", *args],
                   check=True, capture_output=True)


def test_git_info_dirty_means_tracked_files_changed(tmp_path: Path) -> None:
    assert git_info(str(tmp_path)) is None  # not a repository
    git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "a.py").write_text("x = 1\n")
    git(tmp_path, "add", "a.py")
    git(tmp_path, "commit", "-qm", "one")
    clean = git_info(str(tmp_path))
    assert clean is not None and not clean.dirty and clean.branch == "main"
    assert len(clean.commit) == 40 and clean.remote is None
    (tmp_path / "notes.txt").write_text("untracked")  # as `git describe --dirty`: no
    assert not git_info(str(tmp_path)).dirty  # type: ignore[union-attr]
    (tmp_path / "a.py").write_text("x = 2\n")
    assert git_info(str(tmp_path)).dirty  # type: ignore[union-attr]


@pytest.mark.parametrize(("url", "clean"), [
    ("https://user:tok@github.com/a/b.git", "https://github.com/a/b.git"),
    ("https://tok@github.com/a/b.git", "https://github.com/a/b.git"),
    ("git@github.com:a/b.git", "git@github.com:a/b.git"),  # ssh: a user name, no secret
    ("ssh://git@host/x", "ssh://host/x"),
])
def test_remote_urls_lose_their_credentials(url: str, clean: str) -> None:
    assert strip_credentials(url) == clean


def test_params_carry_the_spec_but_no_secret_value() -> None:
    spec = parse_spec({"command": ["python", "train.py", "--lr", "3e-4"], "gpus": 0.5,
                       "env": {"SEED": "1", "TOKEN": "hunter2"}, "secret_env": ["TOKEN"],
                       "secrets": {"HF_TOKEN": "hf"}, "time_limit": "2h"})
    p = mlflow_bridge.spec_params(spec)
    assert p["command"] == "python train.py --lr 3e-4"
    assert (p["gpus"], p["time_limit"], p["env.SEED"], p["secrets"]) == ("0.5", "7200.0", "1",
                                                                        "HF_TOKEN")
    assert "env.TOKEN" not in p and "hunter2" not in str(p)
    assert "llm" not in p  # unset fields are left out, not logged as "None"
    assert mlflow_bridge.metric_key("val loss@top-1") == "val loss_top-1"


def test_wandb_environment_and_links() -> None:
    spec = parse_spec({"command": ["x"], "wandb": True, "project": "proj", "tags": ["a", "b"]})
    env = wandb_bridge.environment(spec, job_id=12, instance="ab12", entity=None,
                                   default_project=None, api_key="k" * 40)
    assert env == {"WANDB_RUN_ID": "rota-ab12-12", "WANDB_RESUME": "allow",
                   "WANDB_PROJECT": "proj", "WANDB_NAME": "job-12", "WANDB_TAGS": "a,b",
                   "WANDB_API_KEY": "k" * 40}
    view = wandb_bridge.view(spec, job_id=12, instance="ab12", entity="lab",
                             default_project=None, found=None)
    assert view["url"] == "https://wandb.ai/lab/proj/runs/rota-ab12-12"
    assert wandb_bridge.link_in(
        "wandb: 🚀 View run x at: https://wandb.ai/lab/proj/runs/rota-ab12-12") == \
        ("url", "https://wandb.ai/lab/proj/runs/rota-ab12-12")
    assert wandb_bridge.link_in("wandb: wandb sync /w/wandb/offline-run-1-rota-ab12-12") == \
        ("offline_dir", "/w/wandb/offline-run-1-rota-ab12-12")
    assert wandb_bridge.link_in("step 3 loss 0.1 https://example.com/runs/x") is None


def test_spec_refuses_bad_secret_references() -> None:
    with pytest.raises(InvalidSpec, match="set both in env and in secrets"):
        parse_spec({"command": ["x"], "env": {"K": "v"}, "secrets": {"K": "k"}})
    with pytest.raises(InvalidSpec, match="not a secret name"):
        parse_spec({"command": ["x"], "secrets": {"K": "bad-name"}})
    with pytest.raises(InvalidSpec, match="not a valid environment variable"):
        parse_spec({"command": ["x"], "secrets": {"1K": "k"}})


def test_secrets_are_encrypted_at_rest_and_only_their_owners(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'rota.db'}")
    key = tmp_path / "secrets.key"
    box = Secrets(store, key, clock=lambda: 1.0)
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    assert box.put("alice", "HF_TOKEN", "hf_abcdef") is True
    assert box.put("alice", "HF_TOKEN", "hf_changed") is False  # replaced
    box.put("bob", "HF_TOKEN", "bobs")
    assert box.values("alice", ["HF_TOKEN", "OTHER"]) == {"HF_TOKEN": "hf_changed"}
    assert box.values("bob", ["HF_TOKEN"]) == {"HF_TOKEN": "bobs"}
    blob = store.secret_ciphertexts("alice", ["HF_TOKEN"])["HF_TOKEN"]
    assert b"hf_changed" not in blob
    assert [n for n, _, _ in store.secret_list("alice")] == ["HF_TOKEN"]
    with pytest.raises(InvalidSpec, match="alice has no stored secret WANDB_API_KEY"):
        box.require("alice", ["HF_TOKEN", "WANDB_API_KEY"])
    with pytest.raises(InvalidSpec, match="empty"):
        box.put("alice", "X", "")
    # the same key file on the next start reads them; another key cannot
    assert Secrets(store, key, clock=lambda: 2.0).values("bob", ["HF_TOKEN"]) == \
        {"HF_TOKEN": "bobs"}
    with pytest.raises(RotaError, match="cannot be decrypted"):
        Secrets(store, tmp_path / "other.key", clock=lambda: 2.0).values("bob", ["HF_TOKEN"])
    box.delete("alice", "HF_TOKEN")
    with pytest.raises(NotFound, match="alice has no secret 'HF_TOKEN'"):
        box.delete("alice", "HF_TOKEN")
    store.close()


def test_job_spec_tracker_fields_default_off() -> None:
    spec = JobSpec(command=["x"])
    assert spec.mlflow is None and spec.wandb is False and spec.secrets == {}


def test_a_finished_run_carries_the_card_and_gives_back_its_git_tags(tmp_path: Path) -> None:
    pytest.importorskip("mlflow", reason="needs mlflow (pip install 'rota[trackers]')")
    bridge = mlflow_bridge.MlflowBridge(f"sqlite:///{tmp_path / 'mlflow.db'}",
                                        artifact_location=str(tmp_path / "artifacts"))
    spec = parse_spec({"command": ["python", "train.py"]})
    bare = bridge.create_run(experiment="rota", run_name="bare", params={}, start_ms=1000,
                             tags=mlflow_bridge.run_tags(job_id=1, user="u", name="bare",
                                                         spec=spec, host="h", git=None))
    tagged = bridge.create_run(
        experiment="rota", run_name="tagged", params={}, start_ms=1000,
        tags=mlflow_bridge.run_tags(job_id=2, user="u", name="tagged", spec=spec, host="h",
                                    git=GitInfo(commit="c0ffee" * 6 + "abcd", dirty=True,
                                                branch="main", remote="https://h/x.git")))
    assert bridge.git_of(bare.run_id) is None
    assert bridge.git_of(tagged.run_id) == {"commit": "c0ffee" * 6 + "abcd", "dirty": True,
                                            "branch": "main", "remote": "https://h/x.git"}
    card = {"rota/card.md": "# tagged (job 2)\n", "rota/card.html": "<h1>tagged</h1>"}
    bridge.finish(tagged.run_id, state="completed", end_ms=2000, log_path=None,
                  checkpoints=[], tags={}, card=card)
    run = bridge.client.get_run(tagged.run_id)
    assert run.info.status == "FINISHED"
    listed = {a.path for a in bridge.client.list_artifacts(tagged.run_id, "rota")}
    assert listed == {"rota/card.md", "rota/card.html", "rota/checkpoints.json"}
    got = Path(bridge.client.download_artifacts(tagged.run_id, "rota/card.md",
                                                str(tmp_path / "dl")))
    assert got.read_text() == "# tagged (job 2)\n"


def test_a_card_that_cannot_be_logged_still_lets_the_run_finish(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow", reason="needs mlflow (pip install 'rota[trackers]')")
    bridge = mlflow_bridge.MlflowBridge(f"sqlite:///{tmp_path / 'mlflow.db'}",
                                        artifact_location=str(tmp_path / "artifacts"))
    ref = bridge.create_run(experiment="rota", run_name="r", params={}, tags={}, start_ms=1)

    def broken(*_: object, **__: object) -> None:
        raise OSError("artifact store full")

    monkeypatch.setattr(bridge.client, "log_text", broken)
    bridge.finish(ref.run_id, state="failed", end_ms=2, log_path=None, checkpoints=[],
                  tags={"rota.state": "failed"}, card={"rota/card.md": "x"})
    run = bridge.client.get_run(ref.run_id)
    assert run.info.status == "FAILED" and run.data.tags["rota.state"] == "failed"
