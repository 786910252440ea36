"""The merge step as its job runs it (``python -m rota.pipeline.merge``) on a tiny Llama
built here: the merged model answers as the base with its adapter did, loads without peft,
is published to a folder, to S3 (moto's server; the manifest last) and to the Hub (a fake
HfApi: private unless --public); the tokenizer swap resizes the embeddings; a bad adapter
fails with nothing left behind; the same merge run again is reused."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from s3_testing import s3_client

from hf_testing import OFFLINE, build_tiny_llama

try:
    import boto3  # noqa: F401  (needed: skipped or failed without it)
    import peft
    import torch
    from moto.server import ThreadedMotoServer  # noqa: F401
    from transformers import AutoModelForCausalLM
except ImportError:
    if os.environ.get("ROTA_REQUIRE_TORCH"):
        raise
    pytest.skip("needs torch, peft, boto3 and moto", allow_module_level=True)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def adapter(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LoRA adapter whose weights are not zero (a fresh one's B is: it changes nothing)."""
    where = tmp_path_factory.mktemp("adapter")
    model = AutoModelForCausalLM.from_pretrained(tiny)
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8,
                                                      target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    lora.save_pretrained(where)
    return where


def run_merge(*args: str, env: dict[str, str] | None = None,
              cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rota.pipeline.merge", *args],
                          env={**os.environ, **OFFLINE, **(env or {})}, capture_output=True,
                          text=True, timeout=300, check=False, cwd=cwd)


def logits(model: Any) -> Any:
    with torch.no_grad():
        return model(torch.tensor([[1, 5, 9, 14, 3]])).logits


def test_the_merged_model_answers_as_the_base_with_its_adapter(
        tiny: Path, adapter: Path, tmp_path: Path) -> None:
    out, rnd = tmp_path / "merged", tmp_path / "round"
    rnd.mkdir()
    r = run_merge("--base", str(tiny), "--adapter", str(adapter), "--out", str(out),
                  "--round-dir", str(rnd), "--device", "cpu", "--publish",
                  str(tmp_path / "kept" / "m1"))
    assert r.returncode == 0, r.stderr
    merged = AutoModelForCausalLM.from_pretrained(out)  # no peft needed
    base = AutoModelForCausalLM.from_pretrained(tiny)
    with_adapter = peft.PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny),
                                                  adapter)
    assert torch.allclose(logits(merged), logits(with_adapter), atol=1e-4)
    assert not torch.allclose(logits(merged), logits(base), atol=1e-3)
    result = json.loads((rnd / "merge.json").read_text())
    assert result["model"] == str(out) and result["published"] == str(tmp_path / "kept/m1")
    assert (tmp_path / "kept/m1/model.safetensors").read_bytes() == \
        (out / "model.safetensors").read_bytes()
    assert not list(tmp_path.glob(".merged.partial-*"))
    # the job's retry: the same merge is reused, not made again
    again = run_merge("--base", str(tiny), "--adapter", str(adapter), "--out", str(out),
                      "--round-dir", str(rnd), "--device", "cpu")
    assert again.returncode == 0 and "already holds this merge; reused" in again.stdout


def test_a_bad_adapter_fails_and_leaves_no_model(tiny: Path, tmp_path: Path) -> None:
    empty = tmp_path / "not-an-adapter"
    empty.mkdir()
    out, rnd = tmp_path / "merged", tmp_path / "round"
    rnd.mkdir()
    for bad in (str(empty), str(tmp_path / "missing")):
        r = run_merge("--base", str(tiny), "--adapter", bad, "--out", str(out),
                      "--round-dir", str(rnd), "--device", "cpu")
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith(f"merge: --adapter {bad}"), r.stderr
    assert not out.exists() and not (rnd / "merge.json").exists()


def test_the_tokenizer_swap_resizes_the_embeddings(tiny: Path, adapter: Path,
                                                   tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    bigger = tmp_path / "tok"
    tok = AutoTokenizer.from_pretrained(tiny)
    tok.add_tokens([f"<extra_{i}>" for i in range(20)])
    tok.save_pretrained(bigger)
    out, rnd = tmp_path / "merged", tmp_path / "round"
    rnd.mkdir()
    r = run_merge("--base", str(tiny), "--adapter", str(adapter), "--out", str(out),
                  "--round-dir", str(rnd), "--device", "cpu", "--tokenizer", str(bigger))
    assert r.returncode == 0, r.stderr
    before = AutoModelForCausalLM.from_pretrained(tiny).get_input_embeddings().weight.shape[0]
    assert f"embeddings {before} -> {len(tok)}" in r.stdout
    merged = AutoModelForCausalLM.from_pretrained(out)
    assert merged.get_input_embeddings().weight.shape[0] == len(tok)
    assert logits(merged).shape[-1] == len(tok)  # and it still runs


def test_published_to_s3_every_file_then_the_manifest(tiny: Path, adapter: Path,
                                                      tmp_path: Path, s3_url: str) -> None:
    s3 = s3_client(s3_url)
    s3.create_bucket(Bucket="models")
    out, rnd = tmp_path / "merged", tmp_path / "round"
    rnd.mkdir()
    none = str(tmp_path / "none")
    r = run_merge("--base", str(tiny), "--adapter", str(adapter), "--out", str(out),
                  "--round-dir", str(rnd), "--device", "cpu", "--publish",
                  "s3://models/tiny/round-1", env={
                      "AWS_ENDPOINT_URL_S3": s3_url, "AWS_ACCESS_KEY_ID": "t",
                      "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1",
                      "AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none})
    assert r.returncode == 0, r.stderr
    manifest = json.loads(s3.get_object(Bucket="models", Key="tiny/round-1/rota-manifest.json")
                          ["Body"].read())["files"]
    local = {p.relative_to(out).as_posix(): p for p in out.rglob("*") if p.is_file()}
    assert sorted(f["name"] for f in manifest) == sorted(local)
    for f in manifest:
        body = s3.get_object(Bucket="models", Key=f"tiny/round-1/{f['name']}")["Body"].read()
        assert hashlib.sha256(body).hexdigest() == f["sha256"] == \
            hashlib.sha256(local[f["name"]].read_bytes()).hexdigest()
    assert json.loads((rnd / "merge.json").read_text())["published"] == \
        "s3://models/tiny/round-1"


FAKE_HUB = """
import json, os, sys, runpy
import huggingface_hub
calls = []
class Api:
    def __init__(self, token=None): calls.append(["token", token])
    def create_repo(self, repo, private, exist_ok, repo_type):
        calls.append(["create", repo, private])
    def upload_folder(self, repo_id, folder_path, repo_type):
        calls.append(["upload", repo_id, sorted(os.listdir(folder_path))])
huggingface_hub.HfApi = Api
sys.argv = ["merge", *sys.argv[1:]]
try:
    runpy.run_module("rota.pipeline.merge", run_name="__main__")
finally:
    print("CALLS " + json.dumps(calls))
"""


@pytest.mark.parametrize("public", [False, True])
def test_published_to_the_hub_private_unless_asked(tiny: Path, adapter: Path, tmp_path: Path,
                                                   public: bool) -> None:
    out, rnd = tmp_path / "merged", tmp_path / "round"
    rnd.mkdir()
    script = tmp_path / "fake_hub.py"
    script.write_text(FAKE_HUB)
    r = subprocess.run([sys.executable, str(script), "--base", str(tiny), "--adapter",
                        str(adapter), "--out", str(out), "--round-dir", str(rnd), "--device",
                        "cpu", "--publish", "hf:{hf_username}/tiny-round-2",
                        *(["--public"] if public else [])],
                       env={**os.environ, **OFFLINE, "HF_USERNAME": "ana",
                            "HF_TOKEN": "hf_secret"}, capture_output=True, text=True,
                       timeout=300, check=False)
    calls = json.loads(r.stdout.split("CALLS ", 1)[1])
    assert ["create", "ana/tiny-round-2", not public] in calls
    upload = next(c for c in calls if c[0] == "upload")
    assert upload[1] == "ana/tiny-round-2" and "model.safetensors" in upload[2]
    assert "hf_secret" not in r.stdout.split("CALLS ", 1)[0] + r.stderr
    assert json.loads((rnd / "merge.json").read_text())["published"] == "ana/tiny-round-2"


def test_published_to_mlflow_as_the_runs_artifacts(tiny: Path, adapter: Path,
                                                   tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    out, rnd = tmp_path / "merged", tmp_path / "round"
    rnd.mkdir()
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    r = run_merge("--base", str(tiny), "--adapter", str(adapter), "--out", str(out),
                  "--round-dir", str(rnd), "--device", "cpu", "--publish", "mlflow",
                  "--mlflow-experiment", "merges",
                  env={"MLFLOW_TRACKING_URI": uri}, cwd=tmp_path)  # ./mlruns: the job's
    assert r.returncode == 0, r.stderr
    published = json.loads((rnd / "merge.json").read_text())["published"]
    assert published.startswith("runs:/") and published.endswith("/model")
    run_id = published.split("/")[1]
    client = MlflowClient(tracking_uri=uri)
    names = {a.path for a in client.list_artifacts(run_id, "model")}
    assert {"model/config.json", "model/model.safetensors"} <= names
