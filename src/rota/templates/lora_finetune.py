"""LoRA fine-tuning of a causal language model on instruction data: the ``lora-finetune``
template.

    python -m rota.templates.lora_finetune --model Qwen/Qwen2.5-0.5B --data train.jsonl \\
        --out runs/lora [--steps 1000] [--lora-r 16] ... [--resume CHECKPOINT]

The data is JSON lines with ``instruction``, ``input`` (optional) and ``output``; each
becomes an Alpaca prompt followed by the response, and only the response's tokens (and
the end-of-sequence token after them) are scored: the prompt's labels are -100. Examples
are cut at ``--max-len`` tokens and padded per batch. LoRA adapters (peft) go on every
linear layer but the output head by default (``--target-modules q_proj,v_proj`` to
choose). Training is the Hugging Face Trainer: ``checkpoint-STEP/`` in ``--out`` every
``--save-every`` steps (the adapter, optimizer, scheduler and random state; the last 3
kept), ``rota.integrations.hf.RotaCallback`` so a stop from Rota saves one and stops on
every rank, and ``--resume`` (Rota's ``{checkpoint}``) or ``ROTA_RESUME_FROM`` to continue
from one. The finished adapter and the tokenizer are saved in ``OUT/adapter``. Run it under
``torch.distributed.run`` for several processes. Needs torch, transformers and peft
(``pip install 'rota[ml]'``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from rota import job
from rota.templates import instruct

KEEP_CHECKPOINTS = 3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="LoRA fine-tuning on instruction data.")
    p.add_argument("--model", required=True, help="a Hugging Face model name or folder")
    p.add_argument("--data", default="", help="JSON lines (default: the shipped sample)")
    p.add_argument("--out", required=True, help="run folder: checkpoint-*/ and adapter/")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=8, help="examples per step per process")
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--warmup", type=float, default=0.03, help="warm-up, a fraction of steps")
    p.add_argument("--lora-r", type=int, default=16)
    p.add_argument("--lora-alpha", type=int, default=32)
    p.add_argument("--lora-dropout", type=float, default=0.05)
    p.add_argument("--target-modules", default="all-linear",
                   help="all-linear, or module names separated by commas")
    p.add_argument("--max-len", type=int, default=512, help="tokens per example")
    p.add_argument("--save-every", type=int, default=200, help="steps between checkpoints")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--resume", default=None, help="a checkpoint-* folder to continue from")
    args = p.parse_args(argv)
    for name in ("steps", "batch_size", "grad_accum", "lora_r", "max_len", "save_every"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    job.should_stop()  # the stop handler, before the slow loading: a stop then is kept
    resume = args.resume or job.resume_from()
    try:
        records = instruct.read_jsonl(args.data or instruct.shipped("instructions.jsonl"))
        if resume and not (Path(resume) / "trainer_state.json").is_file():
            raise instruct.DataError(f"--resume {resume}: not a Trainer checkpoint "
                                     "(no trainer_state.json)")
    except instruct.DataError as e:
        print(f"lora_finetune: {e}", file=sys.stderr)
        return 2
    if args.device == "cuda" and not _cuda():
        print("lora_finetune: --device cuda, but PyTorch sees no GPU", file=sys.stderr)
        return 2
    return train(args, records, resume)


def train(args: argparse.Namespace, records: list[instruct.Record], resume: str | None) -> int:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, Trainer
    from transformers import TrainingArguments as Args

    from rota.integrations.hf import RotaCallback

    on_gpu = args.device != "cpu" and torch.cuda.is_available()
    bf16 = on_gpu and torch.cuda.is_bf16_supported()
    rank0 = os.environ.get("RANK", "0") == "0"
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    if tokenizer.pad_token_id is None:  # Llama-style tokenizers have none: padding is masked
        tokenizer.pad_token = tokenizer.eos_token
    examples, dropped = instruct.encode_all(tokenizer, records, args.max_len)
    if not examples:
        print(f"lora_finetune: every prompt fills --max-len {args.max_len}", file=sys.stderr)
        return 2
    model: Any = AutoModelForCausalLM.from_pretrained(
        args.model, dtype=torch.bfloat16 if bf16 else torch.float32)
    model.config.use_cache = False  # the cache is for generation; training only pays for it
    targets: str | list[str] = args.target_modules if args.target_modules == "all-linear" \
        else [m.strip() for m in args.target_modules.split(",") if m.strip()]
    model = get_peft_model(model, LoraConfig(
        r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
        target_modules=targets, task_type="CAUSAL_LM"))
    if rank0:
        trainable, total = model.get_nb_trainable_parameters()
        print(f"model {args.model}: {total / 1e6:.2f}M parameters, {trainable / 1e6:.3f}M "
              f"trainable (LoRA r={args.lora_r}); {len(examples)} examples"
              + (f" ({dropped} left out: the prompt fills --max-len)" if dropped else "")
              + f"; {'bf16' if bf16 else 'fp32'} on {'cuda' if on_gpu else 'cpu'}", flush=True)

    targs = Args(
        output_dir=args.out, max_steps=args.steps, per_device_train_batch_size=args.batch_size,
        gradient_accumulation_steps=args.grad_accum, learning_rate=args.lr,
        lr_scheduler_type="cosine", warmup_steps=round(args.warmup * args.steps),
        weight_decay=0.0, bf16=bf16, use_cpu=not on_gpu, seed=args.seed,
        ddp_backend="gloo" if distributed and not on_gpu else None,
        ddp_find_unused_parameters=False,  # LoRA leaves no parameter without a gradient
        logging_steps=max(1, min(10, args.steps // 50)), save_strategy="steps",
        save_steps=args.save_every, save_total_limit=KEEP_CHECKPOINTS, report_to=[],
        remove_unused_columns=False,  # the batches carry exactly what the model takes
        disable_tqdm=True)  # a bar redrawn in a log file reads worse than step lines
    stop = RotaCallback()
    trainer = Trainer(model=model, args=targs, train_dataset=examples,
                      data_collator=instruct.Collator(tokenizer.pad_token_id,
                                                      8 if on_gpu else None),
                      processing_class=tokenizer, callbacks=[stop, step_lines()])
    trainer.remove_callback(PrinterCallback)  # its dicts hold numbers as strings
    if resume and rank0:
        state = json.loads((Path(resume) / "trainer_state.json").read_text(encoding="utf-8"))
        print(f"resuming from {resume} at step {state.get('global_step')}", flush=True)
    trainer.train(resume_from_checkpoint=resume)
    step = trainer.state.global_step
    if stop.stopping:
        print(f"rank {os.environ.get('RANK', '0')}: stopped at step {step} for Rota; "
              f"saved {os.path.join(args.out, f'checkpoint-{step}')}", flush=True)
        return 0  # Rota runs it again, from that checkpoint
    adapter = os.path.join(args.out, "adapter")
    trainer.save_model(adapter)  # the adapter and the tokenizer, from rank 0
    if rank0:
        print(f"done at step {step}: adapter saved in {adapter}", flush=True)
    return 0


def step_lines() -> Any:
    """A callback printing ``step 10/1000: loss=2.31 grad_norm=0.52 learning_rate=0.0002
    epoch=0.4``: Rota's metrics and progress, and a readable log."""
    from transformers import TrainerCallback

    class StepLines(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
                   **kwargs: Any) -> None:
            numbers = {k: v for k, v in (logs or {}).items() if k != "total_flos"
                       and isinstance(v, int | float) and not isinstance(v, bool)}
            if state.is_world_process_zero and numbers:
                print(f"step {state.global_step}/{state.max_steps}: "
                      + " ".join(f"{k}={v:.4g}" for k, v in numbers.items()), flush=True)

    return StepLines()


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


if __name__ == "__main__":
    from rota.integrations.stop import leave_process_group

    try:
        code = main()
    finally:
        leave_process_group()
    sys.exit(code)
