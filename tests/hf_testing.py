"""Helpers for tests of the Hugging Face templates: a tiny Llama built here (nothing
downloaded), instruction data, and a daemon's view of a template job; and a tiny Trainer
run whose console output tests read as a job's log."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from rota.templates import instruct
from rota_testing import DaemonProcess, wait_until

OFFLINE = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
           "PYTHONWARNINGS": "ignore"}
ENDED = ("completed", "failed", "cancelled", "timeout")
TRAIN = [{"instruction": f"Add {a} and {b}.", "output": f"{a} + {b} = {a + b}."}
         for a, b in ((2, 3), (4, 9), (7, 1), (5, 5), (8, 6), (3, 12))] + \
        [{"instruction": "Give an antonym.", "input": w, "output": o}
         for w, o in (("hot", "Cold."), ("up", "Down."), ("early", "Late."), ("big", "Small."))]


def build_tiny_llama(where: Path) -> Path:
    """A randomly initialised two-layer Llama and a BPE tokenizer trained here, saved as a
    Hugging Face model folder in WHERE."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    corpus = [instruct.PROMPT_WITH_INPUT, instruct.PROMPT_NO_INPUT, *map(json.dumps, TRAIN),
              *Path(instruct.shipped("heldout.jsonl")).read_text().splitlines()]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", unk_token="<unk>")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id))
    model.save_pretrained(where)
    fast.save_pretrained(where)
    return where


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def submit(d: DaemonProcess, template: str, cwd: Path, *flags: str, **sets: object) -> int:
    args = [w for k, v in sets.items() for w in ("--set", f"{k}={v}")]
    return d.submit("--template", template, *flags, *args, cwd=cwd)


def job(d: DaemonProcess, job_id: int) -> dict[str, Any]:
    with d.client() as c:
        return c.job(job_id)


def finished(d: DaemonProcess, job_id: int, timeout: float) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        j = job(d, job_id)
        return j if j["state"] in ENDED else None
    j: dict[str, Any] = wait_until(ended, timeout=timeout, every=0.2, what=f"job {job_id}")
    assert j["state"] == "completed", attempts_log(d, job_id)[-4000:]
    return j


def attempts_log(d: DaemonProcess, job_id: int) -> str:
    return (d.home / "logs" / f"{job_id}.log").read_text(errors="replace")


def attempt_texts(d: DaemonProcess, job_id: int) -> list[str]:
    """The log of each attempt, split at Rota's header lines."""
    return re.split(r"=== rota: job \d+ attempt \d+ [^\n]*\n", attempts_log(d, job_id))[1:]


def lora_sets(tiny: Path, data: Path, run: Path, **more: object) -> dict[str, object]:
    return {"model": tiny, "data": data, "out": run, "gpus": 0, "device": "cpu",
            "batch_size": 4, "lora_r": 4, "lora_alpha": 8, "max_len": 160, "save_every": 10,
            **more}


# A Hugging Face Trainer run as small as it gets: a one-layer GPT-2 made from a config,
# random token data made here, on the CPU. argv: OUTPUT_DIR MAX_STEPS. Logs every 2 steps,
# evaluates and saves every 4: loss dicts, evaluation dicts, bars and checkpoint-N folders.
TINY_TRAINER = textwrap.dedent("""
    import sys, torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1,
                                       n_head=2, bos_token_id=0, eos_token_id=0))
    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return 32
        def __getitem__(self, i):
            ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}
    args = TrainingArguments(
        output_dir=sys.argv[1], max_steps=int(sys.argv[2]), per_device_train_batch_size=4,
        per_device_eval_batch_size=4, logging_steps=2, save_steps=4, eval_strategy="steps",
        eval_steps=4, report_to=[], use_cpu=True, disable_tqdm=False)
    Trainer(model=model, args=args, train_dataset=Tokens(), eval_dataset=Tokens()).train()
""")


def run_captured(script: str, *args: str, cwd: Path, env: dict[str, str] | None = None,
                 timeout: float = 300) -> bytes:
    """Run a Python script the way Rota runs a job: stdout and stderr into one file (no
    terminal), in ``cwd``; return what it wrote. Fails the test if it fails."""
    path = cwd / "script.py"
    path.write_text(script)
    log = cwd / "job.log"
    with open(log, "wb") as out:
        r = subprocess.run([sys.executable, "-u", str(path), *args], cwd=cwd, stdout=out,
                           stderr=subprocess.STDOUT, timeout=timeout, check=False,
                           env={**os.environ, **OFFLINE, **(env or {})})
    data = log.read_bytes()
    assert r.returncode == 0, data.decode(errors="replace")[-4000:]
    return data


def preempt_after_first_checkpoint(d: DaemonProcess, job_id: int, run: Path) -> None:
    wait_until(lambda: (run / "checkpoint-10" / "trainer_state.json").is_file()
               or job(d, job_id)["state"] in ENDED, timeout=150, every=0.05,
               what="the first checkpoint")
    assert job(d, job_id)["state"] == "running", attempts_log(d, job_id)[-3000:]
    with d.client() as c:  # the API: the least delay between seeing it and stopping
        c.preempt(job_id)


def stopped_and_resumed(d: DaemonProcess, job_id: int, ranks: int) -> int:
    """The step the first attempt stopped at (the same on every rank), checked to be where
    the second attempt resumed and went on from."""
    first, second = attempt_texts(d, job_id)
    stops = sorted(re.findall(r"rank (\d+): stopped at step (\d+) for Rota", first))
    assert [r for r, _ in stops] == [str(k) for k in range(ranks)], first[-3000:]
    assert len({s for _, s in stops}) == 1, stops  # every rank at the same step
    step = int(stops[0][1])
    assert 10 <= step < 200
    assert re.search(rf"resuming from \S+/checkpoint-{step} at step {step}\n", second), second
    logged = [int(s) for s in re.findall(r"^step (\d+)/200: loss=", second, re.MULTILINE)]
    assert logged and step < logged[0] <= step + 4 and logged[-1] == 200, logged
    return step
