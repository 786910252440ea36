"""Templates: ready-made jobs that really train. ``rota templates`` lists them;
``rota submit --template NAME --set key=value ...`` submits one.

A template is a job spec built from a few options, each with a default; ``--set`` values
take the type of the default, and an unknown or ill-typed one is refused naming it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
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
)

TEMPLATES: dict[str, Template] = {t.name: t for t in (NANOGPT,)}


def get(name: str) -> Template:
    t = TEMPLATES.get(name)
    if t is None:
        raise InvalidSpec(f"no template {name!r}; `rota templates` lists them: "
                          f"{', '.join(TEMPLATES)}", field="template")
    return t
