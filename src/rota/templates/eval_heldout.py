"""Loss and perplexity on held-out data: the ``eval-heldout`` template.

    python -m rota.templates.eval_heldout --model Qwen/Qwen2.5-0.5B [--adapter runs/lora/adapter]
        --data heldout.jsonl --out runs/eval [--dtype bfloat16] [--max-examples N]
        [--mlflow-uri URI]

The data is JSON lines, either instructions (``instruction``, ``input``, ``output``: the
Alpaca prompt of ``lora-finetune``, only the response's tokens scored) or ``{"text": ...}``
(every token scored). The loss is the mean over all scored tokens of the file (each token
weighs the same, however the examples are batched), and perplexity is ``exp(loss)``. It
prints one JSON line, ``{"eval_loss": ..., "perplexity": ..., "eval_tokens": ...}``, which
Rota records as metrics, and writes ``OUT/results.json``.

MLflow, when ``mlflow`` is importable: with ``MLFLOW_RUN_ID`` in the environment (Rota sets
it, with ``MLFLOW_TRACKING_URI``, for a job submitted with ``--mlflow``) the metrics and
``results.json`` go to that run, which the daemon opened and closes; else ``--mlflow-uri``
names a tracking server, and a run of its own is made in the experiment ``rota-eval``.
Needs torch and transformers, and peft for ``--adapter`` (``pip install 'rota[ml]'``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from rota.templates import instruct

EXPERIMENT = "rota-eval"
DTYPES = ("auto", "float32", "float16", "bfloat16")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Loss and perplexity on held-out JSON lines.")
    p.add_argument("--model", required=True, help="a Hugging Face model name or folder")
    p.add_argument("--adapter", default="", help="a LoRA adapter folder (peft) on the model")
    p.add_argument("--data", default="", help="JSON lines (default: the shipped sample)")
    p.add_argument("--out", required=True, help="folder for results.json")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-len", type=int, default=1024, help="tokens per example")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--dtype", default="auto", choices=DTYPES,
                   help="the model's weights (auto: bfloat16 on a GPU that has it, else "
                        "float32)")
    p.add_argument("--max-examples", type=int, default=0,
                   help="score the first N examples of the file only (0: all)")
    p.add_argument("--mlflow-uri", default="",
                   help="log to this MLflow server in a new run (experiment rota-eval) when "
                        "Rota gives no run (MLFLOW_RUN_ID)")
    args = p.parse_args(argv)
    if args.batch_size < 1 or args.max_len < 2 or args.max_examples < 0:
        p.error("--batch-size must be at least 1, --max-len at least 2 and --max-examples "
                "not negative")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data = args.data or instruct.shipped("heldout.jsonl")
    try:
        records = instruct.read_jsonl(data, allow_text=True)
        if args.max_examples:
            records = records[:args.max_examples]
        if args.adapter and not (Path(args.adapter) / "adapter_config.json").is_file():
            raise instruct.DataError(f"--adapter {args.adapter}: no adapter_config.json there")
    except instruct.DataError as e:
        print(f"eval_heldout: {e}", file=sys.stderr)
        return 2
    results = evaluate(args, records)
    if results is None:
        return 2
    results.update(model=os.path.abspath(args.model) if os.path.isdir(args.model) else args.model,
                   adapter=os.path.abspath(args.adapter) if args.adapter else None,
                   data=os.path.abspath(data))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: results[k] for k in ("eval_loss", "perplexity", "eval_tokens")}),
          flush=True)
    return to_mlflow(results, path, args.mlflow_uri)


def evaluate(args: argparse.Namespace, records: list[instruct.Record]) -> dict[str, Any] | None:
    import torch
    from torch.nn import functional as F
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" \
        else args.device
    if args.dtype != "auto":
        dtype = getattr(torch, args.dtype)
    elif device == "cuda" and torch.cuda.is_bf16_supported():
        dtype = torch.bfloat16
    else:
        dtype = torch.float32
    # lora-finetune saves the tokenizer with the adapter (pad token and all): prefer it
    own = args.adapter and (Path(args.adapter) / "tokenizer_config.json").is_file()
    tokenizer = AutoTokenizer.from_pretrained(args.adapter if own else args.model)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    examples, dropped = instruct.encode_all(tokenizer, records, args.max_len)
    if not examples:
        print(f"eval_heldout: every prompt fills --max-len {args.max_len}", file=sys.stderr)
        return None
    model: Any = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)
    if args.adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, args.adapter)
    model.to(device).eval()
    collate = instruct.Collator(tokenizer.pad_token_id)
    total, tokens, t0 = 0.0, 0, time.monotonic()
    batches = [examples[i:i + args.batch_size] for i in range(0, len(examples), args.batch_size)]
    print(f"evaluating {args.model}" + (f" + {args.adapter}" if args.adapter else "")
          + f" on {len(examples)} examples" + (f" ({dropped} left out)" if dropped else "")
          + f"; {str(dtype).removeprefix('torch.')} on {device}", flush=True)
    with torch.no_grad():
        for n, group in enumerate(batches, 1):
            batch = {k: v.to(device) for k, v in collate(group).items()}
            logits = model(input_ids=batch["input_ids"],
                           attention_mask=batch["attention_mask"]).logits
            # token t predicts token t+1; summed, so every scored token weighs the same
            labels = batch["labels"][:, 1:]
            total += F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]),
                                     labels.reshape(-1), ignore_index=instruct.IGNORE,
                                     reduction="sum").item()
            tokens += int((labels != instruct.IGNORE).sum().item())
            print(f"batch {n}/{len(batches)}: {tokens} tokens scored", flush=True)
    loss = total / tokens
    return {"eval_loss": loss, "perplexity": math.exp(loss), "eval_tokens": tokens,
            "examples": len(examples), "left_out": dropped,
            "dtype": str(dtype).removeprefix("torch."),
            "seconds": round(time.monotonic() - t0, 3)}


def to_mlflow(results: dict[str, Any], artifact: Path, uri: str) -> int:
    """Log to Rota's MLflow run, or to a new run at ``uri``; 1 when asked for and impossible."""
    run_id = os.environ.get("MLFLOW_RUN_ID")
    if not run_id and not uri:
        return 0
    try:
        from mlflow import MlflowClient
    except ImportError:
        print("eval_heldout: mlflow is not installed here; results are in "
              f"{artifact} only", file=sys.stderr)
        return 1 if uri and not run_id else 0  # Rota's own run gets the metrics from the log
    metrics = {k: float(results[k]) for k in ("eval_loss", "perplexity", "eval_tokens")}
    if run_id:  # the daemon's run: it owns the lifecycle, so neither start nor end it here
        client = MlflowClient(tracking_uri=os.environ.get("MLFLOW_TRACKING_URI") or None)
    else:
        client = MlflowClient(tracking_uri=uri)
        found = client.get_experiment_by_name(EXPERIMENT)
        experiment = found.experiment_id if found else client.create_experiment(EXPERIMENT)
        run_id = client.create_run(experiment, run_name="eval-heldout").info.run_id
        for key in ("model", "adapter", "data"):
            client.log_param(run_id, key, str(results[key]))
    now = int(time.time() * 1000)
    for key, value in metrics.items():
        client.log_metric(run_id, key, value, timestamp=now)
    client.log_artifact(run_id, str(artifact))
    if not os.environ.get("MLFLOW_RUN_ID"):
        client.set_terminated(run_id)
    print(f"results logged to MLflow run {run_id}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
