"""The Hugging Face templates really train and evaluate: lora-finetune on a tiny Llama built
here (nothing downloaded), preempted and resumed, in one process and as two torchrun ranks;
eval-heldout's loss checked against the model's own, logged to MLflow, run by the daemon."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hf_testing import (
    OFFLINE,
    TRAIN,
    build_tiny_llama,
    finished,
    job,
    lora_sets,
    preempt_after_first_checkpoint,
    stopped_and_resumed,
    submit,
    write_jsonl,
)
from rota_testing import DaemonProcess, wait_until

try:
    import peft  # noqa: F401
    import tokenizers  # noqa: F401
    import torch
    import transformers  # noqa: F401
except ImportError:
    if os.environ.get("ROTA_REQUIRE_TORCH"):
        raise
    pytest.skip("needs torch, transformers and peft (pip install 'rota[ml]')",
                allow_module_level=True)

from rota.templates import instruct


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def hf_daemon(daemon_factory: type[DaemonProcess]) -> DaemonProcess:
    return daemon_factory(extra_env=OFFLINE).start()


def test_the_templates_make_their_jobs(tmp_path: Path) -> None:
    from rota.errors import InvalidSpec
    from rota.templates import TEMPLATES, get

    assert {"lora-finetune", "eval-heldout"} <= set(TEMPLATES)
    one = get("lora-finetune").spec([f"out={tmp_path}", "lora_r=4", "target_modules=q_proj"])
    assert one["command"][1:4] == ["-u", "-m", "rota.templates.lora_finetune"]
    assert one["command"][-2:] == ["--resume", "{checkpoint}"]
    assert one["command"][one["command"].index("--lora-r") + 1] == "4"
    assert one["checkpoint_dir"] == str(tmp_path) and one["preemptible"]
    two = get("lora-finetune").spec(["nproc=2", "gpus=2"])["command"]
    assert two[1:8] == ["-u", "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", "2", "-m"]
    with pytest.raises(InvalidSpec, match="one GPU per process"):
        get("lora-finetune").spec(["nproc=2", "gpus=1"])
    ev = get("eval-heldout").spec(["adapter=a", "mlflow_uri=sqlite:///x.db"])["command"]
    assert ev[ev.index("--adapter") + 1] == os.path.abspath("a")
    assert ev[-2:] == ["--mlflow-uri", "sqlite:///x.db"]


def test_instruction_examples_score_only_the_response(tiny: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    rec = instruct.Record(instruct.prompt_of("Add 2 and 3."), "2 + 3 = 5.", eos=True)
    prompt, answer = tok(rec.prompt)["input_ids"], tok(rec.target, add_special_tokens=False)
    full = instruct.encode(tok, rec, 512)
    assert full is not None and prompt[0] == tok.bos_token_id
    assert full["input_ids"] == prompt + answer["input_ids"] + [tok.eos_token_id]
    assert full["labels"] == [instruct.IGNORE] * len(prompt) + answer["input_ids"] + \
        [tok.eos_token_id]
    cut = instruct.encode(tok, rec, len(prompt) + 2)  # cut inside the response
    assert cut is not None and cut["labels"][-2:] == answer["input_ids"][:2]
    assert instruct.encode(tok, rec, len(prompt)) is None  # nothing left to score
    text = instruct.encode(tok, instruct.Record("", "plain words", eos=False), 512)
    assert text is not None and text["input_ids"][0] == tok.bos_token_id  # the only prompt
    assert text["labels"] == [instruct.IGNORE, *text["input_ids"][1:]]  # the rest all scored
    assert text["input_ids"][-1] != tok.eos_token_id

    # a bad file is refused before anything heavy is loaded, naming the line
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instruction": "a", "output": "b"}\n\n{"instruction": "a"\n')
    for data, message in ((bad, f"{bad} line 3: not JSON"),
                          (tmp_path / "none.jsonl", "does not exist")):
        r = subprocess.run([sys.executable, "-m", "rota.templates.lora_finetune", "--model",
                            str(tiny), "--data", str(data), "--out", str(tmp_path / "o")],
                           capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 2 and message in r.stderr, r.stderr
    write_jsonl(bad, [TRAIN[0], {"instruction": "x", "input": "y"}])
    with pytest.raises(instruct.DataError, match=r"line 2: needs 'instruction' and 'output'"
                                                 r".*'output' is missing"):
        instruct.read_jsonl(str(bad))


def test_lora_finetune_is_preempted_resumes_and_finishes(hf_daemon: DaemonProcess, tiny: Path,
                                                         tmp_path: Path) -> None:
    run = tmp_path / "run"
    data = write_jsonl(tmp_path / "train.jsonl", TRAIN)
    job_id = submit(hf_daemon, "lora-finetune", tmp_path,
                    **lora_sets(tiny, data, run, steps=200))
    preempt_after_first_checkpoint(hf_daemon, job_id, run)
    j = finished(hf_daemon, job_id, timeout=240)
    assert j["attempts"] == 2 and j["attempts_detail"][0]["outcome"] == "preempted"
    step = stopped_and_resumed(hf_daemon, job_id, ranks=1)
    state = json.loads((run / "checkpoint-200" / "trainer_state.json").read_text())
    assert state["global_step"] == 200
    assert (run / "adapter" / "adapter_model.safetensors").is_file()
    assert json.loads((run / "adapter" / "adapter_config.json").read_text())["r"] == 4
    r = hf_daemon.cli("metrics", str(job_id), "--json", "--name", "loss")
    assert r.returncode == 0, r.stderr
    loss = json.loads(r.stdout)["series"]["loss"]  # [step, value, time, attempt]
    assert {p[3] for p in loss} == {1, 2} and all(math.isfinite(p[1]) for p in loss)
    assert min(p[0] for p in loss if p[3] == 2) > step


def test_lora_finetune_under_torchrun_is_preempted_and_resumes(hf_daemon: DaemonProcess,
                                                               tiny: Path,
                                                               tmp_path: Path) -> None:
    """Two gloo ranks: the stop reaches both through torchrun; they save one checkpoint at
    the same step, and the next attempt (two ranks again) resumes from it."""
    run = tmp_path / "run"
    data = write_jsonl(tmp_path / "train.jsonl", TRAIN)
    job_id = submit(hf_daemon, "lora-finetune", tmp_path,
                    **lora_sets(tiny, data, run, steps=200, nproc=2, batch_size=2))
    assert "torch.distributed.run" in job(hf_daemon, job_id)["spec"]["command"]
    preempt_after_first_checkpoint(hf_daemon, job_id, run)
    finished(hf_daemon, job_id, timeout=300)
    step = stopped_and_resumed(hf_daemon, job_id, ranks=2)
    events = [json.loads(line) for line in
              (hf_daemon.home / "status" / f"{job_id}-1.events").read_text().splitlines()]
    saved = [e["path"] for e in events if e["kind"] == "checkpoint"]
    assert saved.count(str(run / f"checkpoint-{step}")) == 1  # rank 0 alone reports it
    assert saved[-1] == str(run / f"checkpoint-{step}")
    assert (run / "adapter" / "adapter_model.safetensors").is_file()


def expected_loss(tiny: Path, adapter: Path, rows: list[dict[str, str]]) -> tuple[float, int]:
    """The token-weighted loss worked out with the model's own loss, one example at a time."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny), adapter).eval()
    total, count = 0.0, 0
    for row in rows:
        if "text" in row:
            ids = tok(row["text"])["input_ids"]
            labels = list(ids)
        else:
            prompt = ("Below is an instruction that describes a task. Write a response that "
                      "appropriately completes the request.\n\n### Instruction:\n"
                      f"{row['instruction']}\n\n### Response:\n")
            p = tok(prompt)["input_ids"]
            answer = tok(row["output"], add_special_tokens=False)["input_ids"] + \
                [tok.eos_token_id]
            ids, labels = p + answer, [-100] * len(p) + answer
        with torch.no_grad():
            mean = model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels])).loss
        scored = sum(1 for t in labels[1:] if t != -100)
        total, count = total + mean.item() * scored, count + scored
    return total / count, count


def test_eval_heldout_logs_to_rotas_mlflow_run(tiny: Path, tmp_path: Path) -> None:
    from mlflow import MlflowClient
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    adapter = tmp_path / "adapter"  # random LoRA weights: the adapter must change the loss
    torch.manual_seed(1)
    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny), LoraConfig(
        r=4, target_modules="all-linear", init_lora_weights=False)).save_pretrained(adapter)
    rows = [{"instruction": "Add 4 and 9.", "output": "4 + 9 = 13."},
            {"text": "The river ran quietly past the mill."},
            {"instruction": "Give an antonym of hot.", "output": "Cold."}]
    data = write_jsonl(tmp_path / "heldout.jsonl", rows)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("rota", artifact_location=(tmp_path / "art").as_uri())
    run_id = client.create_run(experiment).info.run_id  # as Rota's daemon would make it
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("ROTA_", "MLFLOW_"))},
           **OFFLINE, "MLFLOW_TRACKING_URI": uri, "MLFLOW_RUN_ID": run_id}
    r = subprocess.run([sys.executable, "-m", "rota.templates.eval_heldout", "--model",
                        str(tiny), "--adapter", str(adapter), "--data", str(data), "--out",
                        str(tmp_path / "eval"), "--batch-size", "2", "--device", "cpu"],
                       env=env, capture_output=True, text=True, timeout=180, check=False)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    printed = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1])
    want, tokens = expected_loss(tiny, adapter, rows)
    assert printed["eval_tokens"] == tokens
    assert printed["eval_loss"] == pytest.approx(want, rel=1e-4)
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert results["eval_loss"] == printed["eval_loss"] and results["adapter"] == str(adapter)

    logged = client.get_run(run_id)
    m = logged.data.metrics
    assert m["eval_loss"] == pytest.approx(printed["eval_loss"])
    assert m["perplexity"] == pytest.approx(math.exp(m["eval_loss"]))
    assert m["eval_tokens"] == tokens
    assert [a.path for a in client.list_artifacts(run_id)] == ["results.json"]
    assert logged.info.status == "RUNNING"  # the daemon's to end, not the job's


def test_eval_heldout_takes_a_dtype_and_scores_the_first_examples(tiny: Path,
                                                                  tmp_path: Path) -> None:
    """--dtype and --max-examples: what the heldout harness passes on for an evaluation
    config's limits.dtype and limits.max_instances."""
    from rota.templates.eval_heldout import parse_args

    rows = [{"text": "The river ran quietly past the mill."},
            {"instruction": "Add 4 and 9.", "output": "4 + 9 = 13."},
            {"text": "A third line, never scored."}]
    data = write_jsonl(tmp_path / "heldout.jsonl", rows)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("ROTA_", "MLFLOW_"))},
           **OFFLINE}
    r = subprocess.run([sys.executable, "-m", "rota.templates.eval_heldout", "--model",
                        str(tiny), "--data", str(data), "--out", str(tmp_path / "eval"),
                        "--device", "cpu", "--dtype", "bfloat16", "--max-examples", "2"],
                       env=env, capture_output=True, text=True, timeout=180, check=False)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "on 2 examples; bfloat16 on cpu" in r.stdout
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert (results["examples"], results["dtype"]) == (2, "bfloat16")
    for bad in (["--dtype", "int8"], ["--max-examples", "-1"]):
        with pytest.raises(SystemExit):
            parse_args(["--model", "m", "--out", "o", *bad])


def test_eval_heldout_under_the_daemon(hf_daemon: DaemonProcess, tiny: Path,
                                       tmp_path: Path) -> None:
    """The shipped held-out sample (instructions and text lines), a new MLflow run in
    rota-eval from the mlflow_uri option, the printed results read as metrics."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path}/own.db"
    job_id = submit(hf_daemon, "eval-heldout", tmp_path, model=tiny, out=tmp_path / "ev",
                    gpus=0, device="cpu", mlflow_uri=uri)
    finished(hf_daemon, job_id, timeout=180)
    results = json.loads((tmp_path / "ev" / "results.json").read_text())
    assert results["examples"] == 10 and results["data"].endswith("heldout.jsonl")
    with hf_daemon.client() as c:
        series = c.metrics(job_id)["series"]
    assert series["eval_loss"][-1][1] == pytest.approx(results["eval_loss"])
    assert series["perplexity"][-1][1] == pytest.approx(math.exp(results["eval_loss"]))
    client = MlflowClient(tracking_uri=uri)
    [run] = client.search_runs([client.get_experiment_by_name("rota-eval").experiment_id])
    assert run.data.metrics["eval_loss"] == pytest.approx(results["eval_loss"])
    assert run.data.params["model"] == str(tiny) and run.info.status == "FINISHED"


def test_eval_heldout_with_mlflow_logs_to_the_run_rota_made(
        daemon_factory: type[DaemonProcess], tiny: Path, tmp_path: Path) -> None:
    """`--template eval-heldout --mlflow`: the daemon makes the run, the job logs its results
    and results.json there, the daemon mirrors the printed metrics and closes the run."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path}/rota-mlflow.db"
    d = daemon_factory(extra_env={**OFFLINE, "ROTA_MLFLOW_TRACKING_URI": uri}).start()
    job_id = submit(d, "eval-heldout", tmp_path, "--mlflow", model=tiny, out=tmp_path / "ev",
                    gpus=0, device="cpu")
    done = finished(d, job_id, timeout=180)
    results = json.loads((tmp_path / "ev" / "results.json").read_text())
    run_id = done["tracking"]["mlflow"]["run_id"]
    client = MlflowClient(tracking_uri=uri)
    wait_until(lambda: client.get_run(run_id).info.status == "FINISHED", 30,
               what="the daemon to close the run")
    run = client.get_run(run_id)
    assert run.data.metrics["eval_loss"] == pytest.approx(results["eval_loss"])
    assert run.data.metrics["perplexity"] == pytest.approx(math.exp(results["eval_loss"]))
    assert run.data.tags["rota.job_id"] == str(job_id)
    assert "rota.templates.eval_heldout" in run.data.params["command"]
    assert "results.json" in {a.path for a in client.list_artifacts(run_id)}
    assert {a.path for a in client.list_artifacts(run_id, "rota")} == \
        {f"rota/{job_id}.log", "rota/checkpoints.json", "rota/card.md", "rota/card.html",
         "rota/loss.svg"}  # (its card: rota.server.storage.cards; its eval_loss drawn)
