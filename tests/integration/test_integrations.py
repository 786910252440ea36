"""The stop handshake inside training frameworks: every rank of a distributed run stops at
the same step, and the Hugging Face Trainer saves a checkpoint and stops when asked."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

try:
    import torch  # noqa: F401
    import transformers  # noqa: F401
except ImportError:
    if os.environ.get("ROTA_REQUIRE_TORCH"):
        raise
    pytest.skip("needs torch and transformers (pip install 'rota[ml]')", allow_module_level=True)

# Two ranks train in lock step (an all_reduce per step, as DDP does); only rank 1 gets the
# stop signal. Both must stop at the same step and leave cleanly.
DISTRIBUTED = textwrap.dedent("""
    import os, signal, sys, time
    import torch, torch.distributed as dist
    from rota.integrations import stop_requested
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for step in range(1000):
        grad = torch.ones(4) * (rank + 1)
        dist.all_reduce(grad)                       # the step's own collective
        if rank == 1 and step == 5:
            os.kill(os.getpid(), signal.SIGTERM)    # Rota's stop reaches one rank only
            time.sleep(0.2)
        if stop_requested():
            print(f"rank {rank} stopped at step {step}", flush=True)
            break
        time.sleep(0.01)
    dist.barrier()                                   # a save would synchronise here
    dist.destroy_process_group()
""")


def test_every_rank_stops_at_the_same_step(tmp_path: Path) -> None:
    script = tmp_path / "ddp.py"
    script.write_text(DISTRIBUTED)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROTA_")}
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", "2", str(script)], env=env, capture_output=True,
                       text=True, timeout=180, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    # both ranks write to one pipe: their lines may run together
    stops = sorted(re.findall(r"rank \d stopped at step \d+", r.stdout))
    assert stops == ["rank 0 stopped at step 5", "rank 1 stopped at step 5"], r.stdout


def test_a_rank_that_asked_leaves_its_process_group_at_exit(tmp_path: Path) -> None:
    """A script that stops when asked and exits without destroying its group: Rota leaves
    the group at exit, before the interpreter's teardown (where gloo's threads can abort a
    finished rank). atexit runs handlers last-registered first, so the check registered
    before ``stop_requested`` runs after Rota's handler."""
    script = tmp_path / "exit.py"
    script.write_text(textwrap.dedent("""
        import atexit, torch.distributed as dist
        from rota.integrations import stop_requested
        atexit.register(lambda: print("initialized at exit:", dist.is_initialized()))
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
        print("stop requested:", stop_requested(), flush=True)
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROTA_")}
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == ["stop requested: False", "initialized at exit: False"], \
        r.stdout + r.stderr


HF = textwrap.dedent("""
    import os, sys, torch
    from transformers import (LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback,
                              TrainingArguments)
    from rota.integrations.hf import RotaCallback

    class Ask(TrainerCallback):  # what Rota does: the stop file appears during step 3
        def on_step_begin(self, args, state, control, **kw):
            if state.global_step == 3:
                open(os.environ["ROTA_STOP_FILE"], "w").close()

    class Tokens(torch.utils.data.Dataset):
        def __len__(self): return 64
        def __getitem__(self, i):
            ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=1, num_attention_heads=2,
                                         num_key_value_heads=2, max_position_embeddings=32))
    args = TrainingArguments(output_dir=sys.argv[1], max_steps=50, per_device_train_batch_size=2,
                             save_strategy="no", report_to=[], logging_steps=1, use_cpu=True)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(),
                      callbacks=[Ask(), RotaCallback()])
    trainer.train()
    print(f"stopped at global step {trainer.state.global_step}", flush=True)  # one write
""")


def job_env(tmp_path: Path, events: Path) -> dict[str, str]:
    """What Rota gives a job for the stop handshake, without a daemon: its events and stop
    files (and no model hub)."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("ROTA_")},
            "ROTA_EVENTS_FILE": str(events), "ROTA_STOP_FILE": str(tmp_path / "stop"),
            "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def test_the_hf_trainer_saves_and_stops_when_asked(tmp_path: Path) -> None:
    script = tmp_path / "hf.py"
    script.write_text(HF)
    out = tmp_path / "out"
    events = tmp_path / "events.jsonl"
    env = job_env(tmp_path, events)
    r = subprocess.run([sys.executable, str(script), str(out)], env=env, capture_output=True,
                       text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "stopped at global step 4" in r.stdout  # step 3 was running when it was asked
    ckpt = out / "checkpoint-4"
    assert (ckpt / "trainer_state.json").is_file()  # saved whole, with the optimizer state
    assert any(ckpt.glob("model.safetensors")) and (ckpt / "optimizer.pt").is_file()
    reported = [json.loads(line) for line in events.read_text().splitlines()]
    assert [(e["kind"], e["path"], e["step"]) for e in reported] == \
        [("checkpoint", str(ckpt), 4)]


HF_DDP = HF.replace(
    '''class Ask(TrainerCallback):  # what Rota does: the stop file appears during step 3
        def on_step_begin(self, args, state, control, **kw):
            if state.global_step == 3:
                open(os.environ["ROTA_STOP_FILE"], "w").close()''',
    '''class Ask(TrainerCallback):  # the stop signal reaches rank 1 only, during step 3
        def on_step_begin(self, args, state, control, **kw):
            if state.global_step == 3 and os.environ["RANK"] == "1":
                import signal
                os.kill(os.getpid(), signal.SIGTERM)''').replace(
    'report_to=[], logging_steps=1, use_cpu=True)',
    'report_to=[], logging_steps=1, use_cpu=True, ddp_backend="gloo")')


def test_the_hf_trainer_stops_every_rank_under_torchrun(tmp_path: Path) -> None:
    """Two ranks, the signal at one: both save at the same step and leave; nobody hangs."""
    assert HF_DDP != HF and "ddp_backend" in HF_DDP
    script = tmp_path / "hf_ddp.py"
    script.write_text(HF_DDP)
    out = tmp_path / "out"
    events = tmp_path / "events.jsonl"
    env = {**job_env(tmp_path, events), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", "2", str(script), str(out)], env=env,
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert sorted(re.findall(r"stopped at global step \d+", r.stdout)) == \
        ["stopped at global step 4"] * 2, r.stdout
    assert (out / "checkpoint-4" / "trainer_state.json").is_file()
    reported = [json.loads(line) for line in events.read_text().splitlines()]
    assert [(e["path"], e["step"]) for e in reported] == [(str(out / "checkpoint-4"), 4)]
