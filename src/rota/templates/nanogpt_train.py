"""A character-level GPT trained on Shakespeare: the ``nanogpt-shakespeare`` template.

    python -m rota.templates.nanogpt_train --out runs/shakespeare [--steps 2000] ...

A small decoder-only transformer (after Karpathy's nanoGPT) on the Shakespeare text that
ships with Rota (``rota/templates/data/shakespeare.txt``, public domain; ``--data FILE``
for another text), so nothing is downloaded. It prints ``step N/TOTAL: loss=... lr=...``
lines and ``val_loss`` every ``--eval-every`` steps (which Rota reads as metrics), writes
the same scalars under the same names to ``OUT/tb`` when TensorBoard is installed (Rota
counts a step both report once), and saves a checkpoint
(model, optimizer, step, random state) to ``OUT/ckpt/step_NNNNNN.pt`` every
``--ckpt-every`` steps and when Rota asks it to stop (``rota.job.should_stop``), telling
Rota with ``rota.job.checkpoint_saved``. ``--resume PATH`` (Rota passes the newest
checkpoint as ``{checkpoint}``) continues from the saved step with the same optimizer state.
Needs PyTorch (``pip install 'rota[ml]'``).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

from rota import job

KEEP_CHECKPOINTS = 3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Train a character-level GPT on Shakespeare.")
    p.add_argument("--out", required=True, help="run folder: ckpt/ and tb/ go here")
    p.add_argument("--data", default=None, help="a text file (default: the shipped Shakespeare)")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--ckpt-every", type=int, default=200)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--device", default="auto", help="auto, cpu, cuda")
    p.add_argument("--resume", default=None, help="a checkpoint to continue from")
    return p.parse_args(argv)


def load_text(path: str | None) -> str:
    if path:
        return Path(path).read_text(encoding="utf-8")
    return resources.files("rota.templates").joinpath("data/shakespeare.txt").read_text(
        encoding="utf-8")


def build_model(vocab: int, args: argparse.Namespace) -> Any:
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(args.n_embd), nn.LayerNorm(args.n_embd)
            self.qkv = nn.Linear(args.n_embd, 3 * args.n_embd)
            self.proj = nn.Linear(args.n_embd, args.n_embd)
            self.mlp = nn.Sequential(nn.Linear(args.n_embd, 4 * args.n_embd), nn.GELU(),
                                     nn.Linear(4 * args.n_embd, args.n_embd),
                                     nn.Dropout(args.dropout))
            self.drop = nn.Dropout(args.dropout)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            shape = (b, t, args.n_head, c // args.n_head)
            q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               dropout_p=args.dropout if self.training else 0.0)
            x = x + self.drop(self.proj(y.transpose(1, 2).reshape(b, t, c)))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, args.n_embd)
            self.pos = nn.Embedding(args.block_size, args.n_embd)
            self.blocks = nn.Sequential(*(Block() for _ in range(args.n_layer)))
            self.ln = nn.LayerNorm(args.n_embd)
            self.head = nn.Linear(args.n_embd, vocab, bias=False)
            self.head.weight = self.tok.weight  # tied, as in GPT-2
            for m in self.modules():  # GPT-2's initialisation: a start near ln(vocab)
                if isinstance(m, nn.Linear | nn.Embedding):
                    nn.init.normal_(m.weight, mean=0.0, std=0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)

        def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.blocks(self.tok(idx) + self.pos(pos))
            logits = self.head(self.ln(x))
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    return GPT()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    out = Path(args.out)
    ckpt_dir = out / "ckpt"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" \
        else args.device
    text = load_text(args.data)
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    split = int(0.9 * len(data))
    train, val = data[:split], data[split:]
    if len(val) <= args.block_size + 1:
        print(f"the text is too short for --block-size {args.block_size}", file=sys.stderr)
        return 2

    torch.manual_seed(args.seed)
    model = build_model(len(chars), args).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    start = 0
    resume = args.resume or job.resume_from()
    if resume:
        state = torch.load(resume, map_location=device, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        start = int(state["step"]) + 1
        print(f"resumed from {resume} at step {start}", flush=True)
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params / 1e6:.2f}M parameters, vocab {len(chars)}, {len(train)} train "
          f"chars, device {device}", flush=True)
    writer = _tensorboard(out / "tb")

    def batch(source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ix = torch.randint(len(source) - args.block_size - 1, (args.batch_size,))
        x = torch.stack([source[i:i + args.block_size] for i in ix])
        y = torch.stack([source[i + 1:i + args.block_size + 1] for i in ix])
        return x.to(device), y.to(device)

    def lr_at(step: int) -> float:
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        done = (step - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, done))))

    def save(step: int) -> Path:
        path = ckpt_dir / f"step_{step:06d}.pt"
        tmp = path.with_suffix(".tmp")
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
                    "rng": torch.get_rng_state(), "args": vars(args), "chars": chars}, tmp)
        os.replace(tmp, path)  # a checkpoint is whole or absent
        job.checkpoint_saved(path, step=step)
        for old in sorted(ckpt_dir.glob("step_*.pt"))[:-KEEP_CHECKPOINTS]:
            old.unlink(missing_ok=True)
        return path

    t0, step = time.monotonic(), start
    for step in range(start, args.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        model.train()
        loss = model(*batch(train))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        value = loss.item()
        print(f"step {step}/{args.steps}: loss={value:.4f} lr={lr_at(step):.3e}", flush=True)
        if writer is not None:
            writer.add_scalar("loss", value, step)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            val_loss = evaluate(model, batch, val)
            print(f"step {step}/{args.steps}: val_loss={val_loss:.4f}", flush=True)
            if writer is not None:
                writer.add_scalar("val_loss", val_loss, step)
        if (step + 1) % args.ckpt_every == 0 or step + 1 == args.steps:
            save(step)
        if job.should_stop():
            print(f"asked to stop: saved {save(step)}", flush=True)
            break
    if writer is not None:
        writer.close()
    print(f"done at step {step} in {time.monotonic() - t0:.1f}s", flush=True)
    return 0


def evaluate(model: Any, batch: Any, val: Any, batches: int = 4) -> float:
    import torch

    model.eval()
    with torch.no_grad():
        losses = [model(*batch(val)).item() for _ in range(batches)]
    return sum(losses) / len(losses)


def _tensorboard(path: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is optional: the printed metrics are enough for Rota
        return None
    return SummaryWriter(str(path))


if __name__ == "__main__":
    sys.exit(main())
