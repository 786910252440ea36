"""Held-out loss and perplexity (rota.templates.eval_heldout) on JSON-lines files: the
config's tasks are the files, one run of the template each, into ``OUT/<file stem>``.

Metrics: ``<file stem>/eval_loss``, ``/perplexity``, and the counts ``/eval_tokens``,
``/examples`` (scored) and ``/left_out`` (examples whose prompt fills ``max_length``, so
nothing of theirs could be scored: a result that skipped some says so). Limits:
``batch_size``, ``max_length`` (tokens per example), ``dtype`` (``auto``: bfloat16 on a GPU
that has it, else float32) and ``max_instances`` (the first N examples of each file) are the
template's options; a few-shot count is refused (rota.eval.config): each example is scored
on its own.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rota.eval.harnesses.base import (
    EvalFailed,
    Harness,
    Metrics,
    Target,
    number,
    option_args,
    read_json,
)

if TYPE_CHECKING:
    from rota.eval.config import EvalConfig

KEYS = ("eval_loss", "perplexity", "eval_tokens", "examples", "left_out")


def task_names(cfg: EvalConfig) -> list[str]:
    names = [Path(t).stem for t in cfg.harness.tasks]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise EvalFailed(f"heldout: two data files are named {', '.join(twice)}: results "
                         "are kept by file name")
    return names


class Heldout(Harness):
    kind = "heldout"
    honours = frozenset({"max_instances", "batch_size", "dtype", "max_length"})
    instead = {"num_fewshot": "held-out loss scores each example on its own, with no "
                              "examples before it"}

    def steps(self, cfg: EvalConfig, target: Target) -> list[list[str]]:
        lim = cfg.harness.limits
        steps = []
        for data, name in zip(cfg.harness.tasks, task_names(cfg), strict=True):
            argv = [sys.executable, "-u", "-m", "rota.templates.eval_heldout",
                    "--model", target.model, "--data", data, "--out", str(target.out / name),
                    "--batch-size", str(lim.batch_size)]
            if lim.max_length is not None:
                argv += ["--max-len", str(lim.max_length)]
            if lim.dtype != "auto":
                argv += ["--dtype", lim.dtype]
            if lim.max_instances is not None:
                argv += ["--max-examples", str(lim.max_instances)]
            if target.adapter:
                argv += ["--adapter", target.adapter]
            steps.append(argv + option_args(cfg.harness.args))
        return steps

    def parse(self, cfg: EvalConfig, out: Path) -> Metrics:
        metrics: Metrics = {}
        for name in task_names(cfg):
            path = out / name / "results.json"
            if not path.is_file():
                raise EvalFailed(f"heldout: no results for {name} ({path} is missing)")
            data = read_json(path)
            for key in KEYS:
                f = number(data.get(key)) if isinstance(data, dict) else None
                if f is not None:
                    metrics[f"{name}/{key}"] = f
        return metrics
