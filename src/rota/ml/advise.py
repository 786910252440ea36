"""`rota estimate`: GPUs, GPU memory and a time limit for a model, a model's config.json, or a
script, each suggestion with its reasons. Pure: the caller reads files and asks the daemon."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rota.ml.estimate import (
    BYTES_PER_PARAM,
    LlmTable,
    estimate_llm,
    gib,
    params_from_config,
    params_from_name,
    sized,
)
from rota.ml.scan import FRAMEWORKS, ScriptFacts

#: A time limit leaves this much room over the longest past run, rounded up to 5 minutes.
TIME_LIMIT_MARGIN = 1.5


@dataclass(frozen=True, slots=True)
class Sizing:
    """What a formula sized (not a table entry): enough to size it otherwise."""

    label: str
    params: float
    mode: str
    dtype: str
    gpu_memory: int  # bytes of each GPU it was sized for


@dataclass
class Advice:
    gpus: float | None = None
    gpu_mem: int | None = None  # bytes per GPU, when the estimate knows
    time_limit: float | None = None  # seconds
    reasons: list[str] = field(default_factory=list)
    sizing: Sizing | None = None  # None: from llm_config.json, or no model sized

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
    return Advice(gpus=est.gpus, gpu_mem=est.gpu_mem, reasons=[est.explanation],
                  sizing=_sizing(model, est.source, table, mode, dtype, gpu_memory))


def for_config(config: dict[str, Any], *, label: str, gpu_memory: int, mode: str,
               dtype: str) -> Advice:
    params = params_from_config(config, source=label)
    est = sized(label, params, gpu_memory=gpu_memory, mode=mode, dtype=dtype,
                source="config.json")
    return Advice(gpus=est.gpus, gpu_mem=est.gpu_mem,
                  reasons=[f"{label}: {params / 1e9:.2f}B parameters counted from the "
                           f"architecture", est.explanation],
                  sizing=Sizing(label, params, mode, dtype, gpu_memory))


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
            a.sizing = _sizing(model, est.source, table, use, dtype, gpu_memory)
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


def _sizing(model: str, source: str, table: LlmTable, mode: str, dtype: str,
            gpu_memory: int) -> Sizing | None:
    params = params_from_name(model)
    if source != "model name" or params is None or table.lookup(model) is not None:
        return None
    return Sizing(model, params, mode, dtype, gpu_memory)


# --- here, and what else would do --------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Machine:
    """What this machine has, as the daemon says: each GPU's memory, and the cluster pools
    (name -> their GPUs, None when the engine does not say) a job may be sent to."""

    gpu_memory: tuple[int, ...]
    pools: dict[str, float | None] = field(default_factory=dict)


def fits(gpus: float | None, gpu_mem: int | None, per_gpu: int, machine: Machine) -> bool:
    """Whether ``gpus`` (a share holding ``gpu_mem``, or whole GPUs sized for ``per_gpu``
    bytes each) can run on this machine: what its daemon accepts, with memory enough."""
    if not gpus:
        return True
    if gpus < 1:
        return any(m >= (gpu_mem or 0) for m in machine.gpu_memory)
    return sum(m >= per_gpu for m in machine.gpu_memory) >= gpus


@dataclass(frozen=True, slots=True)
class Alternative:
    """Another way to run it: what changes, and the GPUs it then takes."""

    kind: str  # "sizing" (the job changes), "pool" or "force" (where it goes)
    what: str
    gpus: float
    gpu_mem: int | None
    fits_here: bool
    submit_options: list[str]
    how: str  # the command that says so or submits it

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "what": self.what, "gpus": self.gpus, "gpu_mem": self.gpu_mem,
                "fits_here": self.fits_here, "submit_options": self.submit_options,
                "how": self.how}


def _shared(gpus: float, gpu_mem: int | None) -> list[str]:
    return Advice(gpus=gpus, gpu_mem=gpu_mem).submit_options()


def alternatives(a: Advice, target: str, machine: Machine) -> list[Alternative]:
    """What would run a job that does not fit here: fewer bytes per weight, LoRA or QLoRA
    in place of a heavier training, a cluster pool with the GPUs, or ``--force``."""
    out: list[Alternative] = []
    s = a.sizing
    if s is not None:
        tries: list[tuple[str, str, str]] = []  # (what, mode, dtype)
        if s.mode in ("inference", "lora"):
            bpp = BYTES_PER_PARAM[s.dtype.lower()]
            tries += [(f"{d} weights", s.mode, d) for d in ("int8", "int4")
                      if BYTES_PER_PARAM[d] < bpp]
        if s.mode == "full":
            tries.append(("LoRA adapters on a frozen base", "lora", s.dtype))
        if s.mode in ("full", "lora"):
            tries.append(("QLoRA (LoRA on a 4-bit base)", "qlora", s.dtype))
        for what, mode, dtype in tries:
            est = sized(s.label, s.params, gpu_memory=s.gpu_memory, mode=mode, dtype=dtype)
            flags = ([f"--mode {mode}"] if mode != s.mode else []) + (
                [f"--dtype {dtype}"] if dtype != s.dtype else [])
            ok = fits(est.gpus, est.gpu_mem, s.gpu_memory, machine)
            out.append(Alternative("sizing", what, est.gpus, est.gpu_mem, ok,
                                   _shared(est.gpus, est.gpu_mem),
                                   f"rota estimate {target} {' '.join(flags)}"))
    if a.gpus:
        need = _shared(a.gpus, a.gpu_mem)
        pools = [p for p, n in machine.pools.items() if n is None or n >= a.gpus]
        for p in pools:
            out.append(Alternative("pool", f"pool {p}", a.gpus, a.gpu_mem, False,
                                   ["--pool", p, *need],
                                   f"rota submit --pool {p} {' '.join(need)} -- ..."))
        if not pools:
            out.append(Alternative(
                "pool", f"a pool that has {a.gpus:g} GPUs: none is declared here ([pools.NAME] in "
                "rota.toml)", a.gpus, a.gpu_mem, False, ["--pool", "NAME", *need],
                f"rota submit --pool NAME {' '.join(need)} -- ..."))
        out.append(Alternative(
            "force", "--force: accepted now, waits until this machine has the GPUs", a.gpus,
            a.gpu_mem, False, ["--force", *need], f"rota submit --force {' '.join(need)} -- ..."))
    return out


def here_text(a: Advice, machine: Machine | None, per_gpu: int) -> str:
    """Whether it fits here, in words."""
    if machine is None:
        return "fits here: unknown (no daemon to ask)"
    have = f"this machine has {len(machine.gpu_memory)} GPU" + (
        "" if len(machine.gpu_memory) == 1 else "s")
    if machine.gpu_memory:
        have += f" (largest {gib(max(machine.gpu_memory))})"
    if not a.gpus:
        need = "no GPU"
    elif a.gpus < 1:
        need = f"{a.gpus:g} of a GPU" + (f" with {gib(a.gpu_mem)}" if a.gpu_mem else "")
    else:
        need = f"{a.gpus:g} GPU{'' if a.gpus == 1 else 's'} of {gib(per_gpu)}"
    ok = fits(a.gpus, a.gpu_mem, per_gpu, machine)
    return f"{'fits' if ok else 'does not fit'} here: needs {need}, {have}"


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
