"""Templates: ready-made jobs that really train. ``rota templates`` lists them;
``rota submit --template NAME --set key=value ...`` submits one.

A template is a job spec built from a few options, each with a default; ``--set`` values
take the type of the default, and an unknown or ill-typed one is refused naming it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rota.errors import InvalidSpec


@dataclass(frozen=True)
class Option:
    name: str
    default: str | int | float
    help: str


@dataclass(frozen=True)
class Template:
    name: str
    summary: str
    needs: str  # what must be installed where the job runs
    options: tuple[Option, ...]
    build: Callable[[dict[str, Any]], dict[str, Any]]
    #: the Python packages its job imports (checked where the daemon runs, at submit)
    modules: tuple[str, ...] = ()

    def values(self, sets: Sequence[str]) -> dict[str, Any]:
        """The options with ``key=value`` overrides, typed like their defaults."""
        known = {o.name: o for o in self.options}
        out: dict[str, Any] = {o.name: o.default for o in self.options}
        for item in sets:
            key, sep, text = item.partition("=")
            key = key.strip().replace("-", "_")
            if not sep:
                raise InvalidSpec(f"--set {item!r}: expected KEY=VALUE", field="set")
            if key not in known:
                raise InvalidSpec(f"--set {key}: {self.name} has no option {key!r}; its "
                                  f"options: {', '.join(known)}", field="set")
            kind = type(known[key].default)
            try:
                out[key] = kind(text)
            except ValueError:
                raise InvalidSpec(f"--set {key}={text!r}: expected {kind.__name__}",
                                  field="set") from None
        return out

    def spec(self, sets: Sequence[str]) -> dict[str, Any]:
        return self.build(self.values(sets))


def _nanogpt(v: dict[str, Any]) -> dict[str, Any]:
    out = os.path.abspath(v["out"])
    argv = [v["python"], "-u", "-m", "rota.templates.nanogpt_train", "--out", out]
    for key in ("steps", "batch_size", "block_size", "n_layer", "n_head", "n_embd", "lr",
                "eval_every", "ckpt_every", "device"):
        argv += [f"--{key.replace('_', '-')}", str(v[key])]
    argv += ["--resume", "{checkpoint}"]
    return {"name": v["name"], "command": argv, "gpus": v["gpus"], "cwd": os.getcwd(),
            "checkpoint_dir": os.path.join(out, "ckpt"), "retries": v["retries"],
            "tensorboard_dir": os.path.join(out, "tb"),
            "preemptible": True, "grace": 60.0, "tags": ["template:nanogpt-shakespeare"]}


NANOGPT = Template(
    name="nanogpt-shakespeare",
    summary="a character-level GPT trained on Shakespeare (shipped, nothing downloaded); "
            "checkpoints, TensorBoard logs, resume",
    needs="PyTorch in the job's Python (pip install 'rota[ml]'); TensorBoard for its logs",
    options=(
        Option("name", "nanogpt-shakespeare", "the job's name"),
        Option("out", "runs/nanogpt-shakespeare", "run folder: ckpt/ and tb/ (relative to here)"),
        Option("python", sys.executable, "the Python that runs it (needs torch)"),
        Option("gpus", 1.0, "GPUs (0 for the CPU, 0.25 to share one)"),
        Option("device", "auto", "auto, cpu or cuda"),
        Option("steps", 2000, "training steps"),
        Option("batch_size", 32, "sequences per step"),
        Option("block_size", 128, "characters of context"),
        Option("n_layer", 4, "transformer layers"),
        Option("n_head", 4, "attention heads"),
        Option("n_embd", 128, "embedding width"),
        Option("lr", 1e-3, "peak learning rate (warm-up, then cosine)"),
        Option("eval_every", 200, "steps between validation losses"),
        Option("ckpt_every", 200, "steps between checkpoints"),
        Option("retries", 3, "retries after a failure (each resumes from the newest checkpoint)"),
    ),
    build=_nanogpt,
    modules=("torch",),
)

def _under_torchrun(v: dict[str, Any], module: str) -> list[str]:
    """``python -m MODULE``, or with ``nproc`` > 1 the same under torchrun, one process each."""
    if v["nproc"] < 1:
        raise InvalidSpec(f"--set nproc={v['nproc']}: at least 1", field="set")
    nodes = v.get("nodes", 1)
    if nodes < 1:
        raise InvalidSpec(f"--set nodes={nodes}: at least 1", field="set")
    if v["nproc"] == 1 and nodes == 1:
        return [v["python"], "-u", "-m", module]
    if 0 < v["gpus"] < v["nproc"]:
        raise InvalidSpec(f"--set nproc={v['nproc']}: one GPU per process, so gpus="
                          f"{v['nproc']} (or gpus=0 with device=cpu)", field="set")
    # one node: torchrun's own rendezvous; several: the cluster's engine gives each node its
    # rank and the first node's address (PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT)
    where = ["--standalone"] if nodes == 1 else ["--nnodes", str(nodes)]
    return [v["python"], "-u", "-m", "torch.distributed.run", *where,
            "--nproc-per-node", str(v["nproc"]), "-m", module]


def _flags(v: dict[str, Any], keys: Sequence[str]) -> list[str]:
    return [word for k in keys for word in (f"--{k.replace('_', '-')}", str(v[k]))]


def _local(path: str) -> str:
    """A path made absolute (the job may run elsewhere); "" (the shipped sample) kept."""
    return os.path.abspath(path) if path else ""


def _model(name: str) -> str:
    """A model folder made absolute; a Hugging Face model name as it is."""
    return os.path.abspath(name) if os.path.isdir(name) else name


def _lora(v: dict[str, Any]) -> dict[str, Any]:
    out = os.path.abspath(v["out"])
    argv = [*_under_torchrun(v, "rota.templates.lora_finetune"), "--model", _model(v["model"]),
            "--data", _local(v["data"]), "--out", out,
            *_flags(v, ("steps", "batch_size", "grad_accum", "lr", "lora_r", "lora_alpha",
                        "lora_dropout", "target_modules", "max_len", "save_every", "device")),
            "--resume", "{checkpoint}"]
    grace = 60.0
    # torchrun SIGKILLs its workers 30 s after passing the stop on: give them the grace
    env = {"PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false",
           "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(int(grace) - 5)}
    spread = {"nodes": v["nodes"], "procs_per_node": v["nproc"]} if v["nodes"] > 1 else {}
    return {"name": v["name"], "command": argv, "gpus": v["gpus"], "cwd": os.getcwd(),
            "env": env, "checkpoint_dir": out, "retries": v["retries"], "preemptible": True,
            "grace": grace, "tags": ["template:lora-finetune"], **spread}


LORA = Template(
    name="lora-finetune",
    summary="LoRA fine-tuning (transformers + peft) of a causal LM on instruction JSON lines: "
            "Alpaca prompts, loss on the responses only, checkpoints, resume, torchrun",
    needs="torch, transformers and peft in the job's Python (pip install 'rota[ml]'); the "
          "model's files, or access to the Hugging Face Hub",
    options=(
        Option("name", "lora-finetune", "the job's name"),
        Option("model", "Qwen/Qwen2.5-0.5B", "a Hugging Face model name or folder"),
        Option("data", "", "JSON lines of instruction, input (optional), output (default: "
                           "40 shipped examples)"),
        Option("out", "runs/lora-finetune", "run folder: checkpoint-*/ and adapter/"),
        Option("python", sys.executable, "the Python that runs it"),
        Option("gpus", 1.0, "GPUs (0 for the CPU; nproc for nproc processes)"),
        Option("device", "auto", "auto, cpu or cuda"),
        Option("nproc", 1, "processes (data parallel, under torchrun)"),
        Option("nodes", 1, "machines (a cluster pool: --pool; nproc processes on each)"),
        Option("steps", 1000, "optimizer steps"),
        Option("batch_size", 8, "examples per step per process"),
        Option("grad_accum", 1, "batches per optimizer step"),
        Option("lr", 2e-4, "peak learning rate (3% warm-up, then cosine)"),
        Option("lora_r", 16, "LoRA rank"),
        Option("lora_alpha", 32, "LoRA alpha (the update is scaled by alpha / r)"),
        Option("lora_dropout", 0.05, "dropout on the LoRA input"),
        Option("target_modules", "all-linear", "all-linear, or names: q_proj,k_proj,v_proj"),
        Option("max_len", 512, "tokens per example (longer ones are cut)"),
        Option("save_every", 200, "steps between checkpoints"),
        Option("retries", 3, "retries after a failure (each resumes from the newest checkpoint)"),
    ),
    build=_lora,
    modules=("torch", "transformers", "peft"),
)


def _eval(v: dict[str, Any]) -> dict[str, Any]:
    out = os.path.abspath(v["out"])
    argv = [v["python"], "-u", "-m", "rota.templates.eval_heldout", "--model", _model(v["model"]),
            "--adapter", _local(v["adapter"]), "--data", _local(v["data"]), "--out", out,
            *_flags(v, ("batch_size", "max_len", "device"))]
    if v["mlflow_uri"]:
        argv += ["--mlflow-uri", v["mlflow_uri"]]
    return {"name": v["name"], "command": argv, "gpus": v["gpus"], "cwd": os.getcwd(),
            "env": {"TOKENIZERS_PARALLELISM": "false"}, "retries": v["retries"],
            "tags": ["template:eval-heldout"]}


EVAL = Template(
    name="eval-heldout",
    summary="loss and perplexity of a model, or a model plus a LoRA adapter, on held-out "
            "JSON lines (instructions or text); results.json, metrics, MLflow",
    needs="torch and transformers in the job's Python, peft for an adapter (pip install "
          "'rota[ml]'); mlflow to log there",
    options=(
        Option("name", "eval-heldout", "the job's name"),
        Option("model", "Qwen/Qwen2.5-0.5B", "a Hugging Face model name or folder"),
        Option("adapter", "", "a LoRA adapter folder, e.g. runs/lora-finetune/adapter"),
        Option("data", "", "JSON lines: instruction/input/output or text (default: a shipped "
                           "sample)"),
        Option("out", "runs/eval-heldout", "folder for results.json"),
        Option("python", sys.executable, "the Python that runs it"),
        Option("gpus", 1.0, "GPUs (0 for the CPU)"),
        Option("device", "auto", "auto, cpu or cuda"),
        Option("batch_size", 8, "examples per forward pass"),
        Option("max_len", 1024, "tokens per example (longer ones are cut)"),
        Option("mlflow_uri", "", "an MLflow tracking URI to log to in a new run (experiment "
                                 "rota-eval); a job given --mlflow logs to its own run"),
        Option("retries", 1, "retries after a failure"),
    ),
    build=_eval,
    modules=("torch", "transformers"),
)

def _eval_harness(v: dict[str, Any]) -> dict[str, Any]:
    from rota.templates import eval_harness

    return eval_harness.build(v)


EVAL_HARNESS = Template(
    name="eval-lm-harness",
    summary="lm-evaluation-harness tasks on a model (a folder, a hub name, or an MLflow/S3 "
            "model fetched first), optionally with a LoRA adapter; every task/metric to "
            "Rota and MLflow, and a failed or empty evaluation fails the job",
    needs="lm-eval, torch and transformers in the job's Python (pip install "
          "'rota[eval,ml]'); peft for an adapter",
    options=(
        Option("name", "eval-lm-harness", "the evaluation's name (its results group by it)"),
        Option("model", "Qwen/Qwen2.5-0.5B", "a folder, a hub name, runs:/RUN/PATH, "
                                             "models:/NAME/VERSION or s3://..."),
        Option("adapter", "", "a LoRA adapter: a folder or an MLflow/S3 URI"),
        Option("tasks", "arc_easy", "lm-eval tasks, comma-separated"),
        Option("task_dir", "", "a folder of task YAMLs of your own (lm-eval --include_path)"),
        Option("num_fewshot", -1, "few-shot examples (-1: each task's default)"),
        Option("limit", 0, "examples per task at most (0: all)"),
        Option("batch_size", 8, "examples per forward pass"),
        Option("dtype", "auto", "auto, float32, float16 or bfloat16"),
        Option("max_length", 0, "tokens per example (0: the model's)"),
        Option("device", "", "lm-eval's device: cuda, cpu (default: lm-eval's choice)"),
        Option("out", "runs/eval-lm-harness", "folder for the harness's output and the "
                                              "fetched model"),
        Option("python", sys.executable, "the Python that runs it"),
        Option("gpus", 1.0, "GPUs (0 for the CPU)"),
        Option("experiment", "rota-eval", "the MLflow experiment of its run"),
        Option("creator", "", "tracking tag creator (default: your user name)"),
        Option("lifecycle", "experimental", "tracking tag lifecycle, e.g. candidate, release"),
        Option("retries", 1, "retries after a failure"),
    ),
    build=_eval_harness,
    modules=("lm_eval", "torch", "transformers"),
)

TEMPLATES: dict[str, Template] = {t.name: t for t in (NANOGPT, LORA, EVAL, EVAL_HARNESS)}


def get(name: str) -> Template:
    t = TEMPLATES.get(name)
    if t is None:
        raise InvalidSpec(f"no template {name!r}; `rota templates` lists them: "
                          f"{', '.join(TEMPLATES)}", field="template")
    return t


TAG_PREFIX = "template:"  # a template's job carries the tag template:NAME


def missing_modules(tags: Iterable[str]) -> dict[str, list[str]]:
    """For each template a job with these tags was made from: the Python packages it
    needs that are not installed here (found without importing them: no torch import in
    the daemon). Templates with nothing missing are left out."""
    out: dict[str, list[str]] = {}
    for tag in tags:
        t = TEMPLATES.get(tag.removeprefix(TAG_PREFIX)) if tag.startswith(TAG_PREFIX) else None
        if t is None:
            continue
        missing = [m for m in t.modules if importlib.util.find_spec(m) is None]
        if missing:
            out[t.name] = missing
    return out
