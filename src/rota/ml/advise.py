"""`rota estimate`: GPUs, GPU memory and a time limit for a model, a model's config.json, or a
script, each suggestion with its reasons. Pure: the caller reads files and asks the daemon."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rota.ml.estimate import LlmTable, estimate_llm, params_from_config, params_from_name, sized
from rota.ml.scan import FRAMEWORKS, ScriptFacts

#: A time limit leaves this much room over the longest past run, rounded up to 5 minutes.
TIME_LIMIT_MARGIN = 1.5


@dataclass
class Advice:
    gpus: float | None = None
    gpu_mem: int | None = None  # bytes per GPU, when the estimate knows
    time_limit: float | None = None  # seconds
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"gpus": self.gpus, "gpu_mem": self.gpu_mem, "time_limit": self.time_limit,
                "reasons": self.reasons}

    def submit_options(self) -> list[str]:
        out = []
        if self.gpus is not None:
            out += ["--gpus", f"{self.gpus:g}"]
        if self.gpu_mem:
            out += ["--gpu-mem", f"{math.ceil(self.gpu_mem / 2**30)}G"]
        if self.time_limit:
            out += ["--time-limit", f"{math.ceil(self.time_limit / 60)}m"]
        return out


def for_model(model: str, *, table: LlmTable, gpu_memory: int, mode: str,
              dtype: str) -> Advice:
    est = estimate_llm(model, table=table, gpu_memory=gpu_memory, mode=mode, dtype=dtype)
    return Advice(gpus=est.gpus, gpu_mem=est.gpu_mem, reasons=[est.explanation])


def for_config(config: dict[str, Any], *, label: str, gpu_memory: int, mode: str,
               dtype: str) -> Advice:
    params = params_from_config(config, source=label)
    est = sized(label, params, gpu_memory=gpu_memory, mode=mode, dtype=dtype,
                source="config.json")
    return Advice(gpus=est.gpus, gpu_mem=est.gpu_mem,
                  reasons=[f"{label}: {params / 1e9:.2f}B parameters counted from the "
                           f"architecture", est.explanation])


def for_script(facts: ScriptFacts, *, name: str, table: LlmTable, gpu_memory: int,
               mode: str | None, dtype: str, past_runs: Sequence[float] = ()) -> Advice:
    """Advice from what the script's code shows, and from how long it ran before."""
    a = Advice()
    why = a.reasons
    if facts.frameworks:
        why.append("imports " + ", ".join(f"{FRAMEWORKS[k]} (line {n})"
                                          for k, n in sorted(facts.frameworks.items(),
                                                             key=lambda kv: kv[1])))
    if not facts.uses_gpu:
        a.gpus = 0.0
        why.append("no GPU use found (no .cuda(), device='cuda', model loading or training "
                   "with a GPU framework): CPU only")
    else:
        if facts.gpu_uses:
            line, what = facts.gpu_uses[0]
            why.append(f"uses a GPU: {what} (line {line})")
        use = mode or facts.mode
        how = {"qlora": "trains LoRA adapters on a 4-bit base", "lora": "trains LoRA adapters",
               "full": "trains the whole model", "inference": "runs the model (no training "
               "found)"}[use]
        evidence = (facts.four_bit + facts.lora + facts.training)[:2]
        why.append(how + ("" if mode else "".join(f"; {w} (line {n})" for n, w in evidence))
                   + (" (as --mode says)" if mode else ""))
        sized_models = [(n, m, params_from_name(m)) for n, m in facts.models]
        known = [(n, m, p) for n, m, p in sized_models if p is not None or table.lookup(m)]
        if known:
            line, model, _ = max(known, key=lambda t: t[2] or 0.0)
            est = estimate_llm(model, table=table, gpu_memory=gpu_memory, mode=use,
                               dtype=dtype)
            a.gpus, a.gpu_mem = est.gpus, est.gpu_mem
            why.append(f"loads {model} (line {line}): {est.explanation}")
        else:
            a.gpus = 1.0
            unsized = ", ".join(m for _, m in facts.models)
            why.append("no model size found" + (f" (loads {unsized}, whose name has no size)"
                                                 if unsized else "")
                       + ": 1 GPU; put the model in llm_config.json or pass --gpus")
        if facts.multi_gpu:
            line, what = facts.multi_gpu[0]
            why.append(f"can use several GPUs: {what} (line {line}); the count above is what "
                       "the model needs, more can speed it up")
    for line, key, value in facts.batch_sizes[:2]:
        why.append(f"batch size {value} ({key}, line {line}): activations grow with it and "
                   "are not in the estimate")
    a.time_limit, note = time_limit_from(past_runs, name)
    why.append(note)
    return a


def time_limit_from(durations: Sequence[float], name: str) -> tuple[float | None, str]:
    """A time limit from past runs: the longest x 1.5, rounded up to 5 minutes."""
    runs = [d for d in durations if d > 0]
    if not runs:
        return None, (f"no finished run of {name} to learn a time limit from; set one with "
                      "--time-limit once you know")
    limit = math.ceil(max(runs) * TIME_LIMIT_MARGIN / 300) * 300
    return float(limit), (f"{len(runs)} past run{'s' if len(runs) != 1 else ''} of {name} "
                          f"took up to {_dur(max(runs))}: time limit {_dur(limit)} "
                          f"(x{TIME_LIMIT_MARGIN:g}, rounded up)")


def _dur(s: float) -> str:
    whole = round(s)
    h, rest = divmod(whole, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{sec:02d}s" if m else f"{sec}s"
