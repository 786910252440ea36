"""How many GPUs (and how much GPU memory) a job with ``--llm MODEL`` needs.

Order of evidence:

1. ``llm_config.json`` (an :class:`LlmTable`): what the user measured wins.
2. The parameter count read from the model's name (``qwen2.5-7b`` -> 7e9), turned into
   bytes by :func:`estimate_memory`.
3. The table's ``default_requirement``; otherwise an error asking for a table entry or
   ``--gpus``.

The memory formula is a deliberately simple rule of thumb, good to about +-20%:

    weights   = params x bytes per parameter (fp32 4, bf16/fp16 2, int8/fp8 1, int4/nf4 0.5)
    inference = weights x 1.2      KV cache, activations and CUDA context
    lora      = weights x 1.3      frozen base in ``dtype``, plus small adapters, their
                                   Adam state and activations
    qlora     = params x 0.5 x 1.3 + 1 GiB
                                   4-bit base whatever ``dtype`` says, plus adapters and
                                   the dequantisation buffers
    full      = params x 16 x 1.2  mixed-precision Adam: bf16 weights (2) + grads (2) +
                                   fp32 master weights (4) + two fp32 moments (8) = 16
                                   bytes/param, plus 20% for activations; ``dtype`` ignored

Sources: Hugging Face, "Model training anatomy" (transformers docs, ~18 bytes/param for
mixed-precision AdamW training, 6 for inference with fp32 weights); EleutherAI,
"Transformer Math 101" (2 bytes/param for bf16 inference weights plus ~20% overhead;
16 bytes/param for mixed-precision Adam state); Dettmers et al., "QLoRA" (2023) for the
4-bit base. Activations depend on batch size and sequence length, which a name does not
tell: when the estimate is wrong, put the model in ``llm_config.json``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rota.errors import InvalidSpec

GIB = 1 << 30
#: GPUs are handed out to fractional jobs in quarters.
FRACTION_STEP = 0.25
#: Share of each GPU's memory counted on when a model is split over several GPUs
#: (tensor/pipeline-parallel buffers, fragmentation, uneven layer split).
MULTI_GPU_USABLE = 0.9

BYTES_PER_PARAM: dict[str, float] = {
    "fp32": 4, "float32": 4, "tf32": 4,
    "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "half": 2,
    "int8": 1, "fp8": 1,
    "int4": 0.5, "nf4": 0.5, "fp4": 0.5,
}
MODES = ("inference", "lora", "qlora", "full")

# Mixture-of-experts models share attention and embedding weights between experts, so
# "8x7b" is fewer than 8 * 7e9 parameters. Known totals first; otherwise N * M * 0.83
# (Mixtral 8x7B: 46.7B / 56B = 0.83).
_MOE_TOTALS: dict[str, float] = {"8x7b": 46.7e9, "8x22b": 141e9}
_MOE_SHARED = 0.83
_SCALE = {"m": 1e6, "b": 1e9, "t": 1e12}
# Size tokens, whole after splitting the name on - _ / : and spaces. "k" is left out on
# purpose: "4k"/"128k" in names are context lengths, not parameter counts.
_SIZE = re.compile(r"(\d+(?:\.\d+)?)([mbt])")
_SIZE_BLOOM = re.compile(r"(\d+)([mbt])(\d+)")  # bloom-7b1 = 7.1B, bloom-1b7 = 1.7B
_SIZE_MOE = re.compile(r"(\d+)x(\d+(?:\.\d+)?)([mbt])")
_SPLIT = re.compile(r"[-_/:\s]+")
#: Models whose names carry no size, by their Hugging Face names (an org prefix is
#: dropped): the published parameter counts.
KNOWN_PARAMS: dict[str, float] = {
    "gpt2": 124e6, "distilgpt2": 82e6, "gpt2-medium": 355e6, "gpt2-large": 774e6,
    "gpt2-xl": 1.558e9, "bert-base-uncased": 110e6, "bert-base-cased": 109e6,
    "bert-large-uncased": 336e6, "bert-large-cased": 335e6,
    "distilbert-base-uncased": 66e6, "roberta-base": 125e6, "roberta-large": 355e6,
    "t5-small": 60e6, "t5-base": 220e6, "t5-large": 770e6,
}


@dataclass(frozen=True, slots=True)
class LlmTable:
    """User-measured GPU needs per model, in GPUs (fractions allowed below one)."""

    models: dict[str, float] = field(default_factory=dict)  # lower-cased names
    default_requirement: float | None = None
    path: str | None = None

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "llm_config.json") -> LlmTable:
        """Validate the ``llm_config.json`` shape; an error names the file and the key."""
        if not isinstance(data, dict):
            raise InvalidSpec(f"{source}: expected a JSON object with 'models', got "
                              f"{type(data).__name__}", field="llm_config")
        unknown = sorted(set(data) - {"default_requirement", "models"})
        if unknown:
            raise InvalidSpec(f"{source}: unknown key(s) {unknown} (expected "
                              "'default_requirement' and 'models')", field="llm_config")
        default = data.get("default_requirement")
        if default is not None:
            default = _gpus(default, f"{source}: default_requirement")
        models = data.get("models", {})
        if not isinstance(models, dict):
            raise InvalidSpec(f"{source}: 'models' must be an object of name -> GPUs, got "
                              f"{type(models).__name__}", field="llm_config")
        table: dict[str, float] = {}
        for name, value in models.items():
            if not isinstance(name, str) or not name.strip():
                raise InvalidSpec(f"{source}: models: empty model name", field="llm_config")
            table[name.strip().lower()] = _gpus(value, f"{source}: models.{name}")
        return cls(models=table, default_requirement=default, path=source)

    @classmethod
    def load(cls, path: str | Path) -> LlmTable:
        """Read a table from disk; a missing file is an empty table (the file is optional)."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls(path=str(p))
        except (OSError, UnicodeDecodeError) as e:
            raise InvalidSpec(f"{p}: cannot read: {e}", field="llm_config") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise InvalidSpec(f"{p}: not valid JSON: {e.msg} at line {e.lineno} column "
                              f"{e.colno}", field="llm_config") from None
        return cls.from_dict(data, source=str(p))

    def lookup(self, model: str) -> float | None:
        """GPUs for ``model``, case-insensitive; ``Org/Name`` also matches an entry ``name``."""
        key = model.strip().lower()
        if key in self.models:
            return self.models[key]
        base = key.rsplit("/", 1)[-1]
        return self.models.get(base)


def _gpus(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidSpec(f"{where}: expected a number of GPUs, got {value!r}",
                          field="llm_config")
    if value <= 0:
        raise InvalidSpec(f"{where}: the number of GPUs must be positive, got {value!r}",
                          field="llm_config")
    if value > 1 and value != int(value):
        raise InvalidSpec(f"{where}: {value!r} GPUs: more than one GPU must be a whole number",
                          field="llm_config")
    return float(value)


def params_from_name(model: str) -> float | None:
    """Parameter count from a model name, or None when the name does not say.

    The size is the first token (after splitting on ``- _ / :``) that is entirely a size,
    like ``7b``, ``0.5B``, ``110m``, ``8x7b`` or ``7b1``. Version numbers glued to a name
    (``qwen2.5``) or standing alone (``llama-3.1``, ``v0.1``) carry no unit and are skipped.
    Common models whose names have no size (``gpt2``, ``bert-base-uncased``) are known.
    """
    known = KNOWN_PARAMS.get(model.strip().lower().rsplit("/", 1)[-1])
    if known is not None:
        return known
    for token in _SPLIT.split(model.strip().lower()):
        if m := _SIZE.fullmatch(token):
            return float(m.group(1)) * _SCALE[m.group(2)]
        if m := _SIZE_BLOOM.fullmatch(token):
            return float(f"{m.group(1)}.{m.group(3)}") * _SCALE[m.group(2)]
        if m := _SIZE_MOE.fullmatch(token):
            if token in _MOE_TOTALS:
                return _MOE_TOTALS[token]
            return int(m.group(1)) * float(m.group(2)) * _SCALE[m.group(3)] * _MOE_SHARED
    return None


def _mode_factor(mode: str) -> float:
    return {"inference": 1.2, "lora": 1.3}[mode]


def estimate_memory(params: float, *, dtype: str = "bf16", mode: str = "inference") -> int:
    """Bytes of GPU memory for a model of ``params`` parameters (formula in the module doc)."""
    if not params > 0:
        raise InvalidSpec(f"params: must be positive, got {params!r}", field="params")
    bpp = BYTES_PER_PARAM.get(dtype.lower())
    if bpp is None:
        raise InvalidSpec(f"dtype: unknown {dtype!r} (one of {', '.join(BYTES_PER_PARAM)})",
                          field="dtype")
    if mode in ("inference", "lora"):
        need = params * bpp * _mode_factor(mode)
    elif mode == "qlora":
        need = params * 0.5 * 1.3 + GIB
    elif mode == "full":
        need = params * 16 * 1.2
    else:
        raise InvalidSpec(f"mode: unknown {mode!r} (one of {', '.join(MODES)})", field="mode")
    return math.ceil(need)


@dataclass(frozen=True, slots=True)
class LlmEstimate:
    """What a ``--llm`` job needs: ``gpus`` as JobSpec counts them, and where that came from."""

    gpus: float
    gpu_mem: int | None  # bytes on its GPU for a fractional job; None for whole GPUs
    source: str  # "llm_config.json" | "model name" | "default_requirement"
    explanation: str  # one sentence for people (`rota why`, `rota submit --dry-run`)


def gib(n: float) -> str:
    """Bytes in GiB, the unit ``--gpu-mem`` and ``--gpu-memory`` read (``24G`` is 24 GiB)."""
    return f"{n / GIB:.1f} GiB"


def _count(gpus: float) -> str:
    return f"{gpus:g} GPU" + ("" if gpus == 1 else "s")


def estimate_llm(model: str, *, table: LlmTable, gpu_memory: int, mode: str = "inference",
                 dtype: str = "bf16") -> LlmEstimate:
    """GPUs for ``--llm MODEL`` on GPUs of ``gpu_memory`` bytes each (see the module doc)."""
    if not model.strip():
        raise InvalidSpec("llm: the model name is empty", field="llm")
    if gpu_memory <= 0:
        raise InvalidSpec(f"gpu_memory: must be positive, got {gpu_memory}", field="gpu_memory")
    where = table.path or "llm_config.json"
    listed = table.lookup(model)
    if listed is not None:
        return LlmEstimate(listed, None, "llm_config.json",
                           f"{model}: {_count(listed)}, as listed in {where}")
    params = params_from_name(model)
    if params is None:
        if table.default_requirement is not None:
            d = table.default_requirement
            return LlmEstimate(d, None, "default_requirement",
                               f"{model}: size unknown; {_count(d)} from default_requirement "
                               f"in {where}")
        raise InvalidSpec(f"cannot tell the size of model {model!r}: add it to "
                          "llm_config.json or pass --gpus", field="llm")
    return sized(model, params, gpu_memory=gpu_memory, mode=mode, dtype=dtype,
                 source="model name")


def sized(label: str, params: float, *, gpu_memory: int, mode: str = "inference",
          dtype: str = "bf16", source: str = "model size") -> LlmEstimate:
    """GPUs for a model of ``params`` parameters on GPUs of ``gpu_memory`` bytes: a share of
    one (in quarters) when it fits, else whole GPUs."""
    need = estimate_memory(params, dtype=dtype, mode=mode)
    how = _formula(label, params, dtype, mode, need)
    if need <= gpu_memory:
        quarters = max(1, -(-need * 4 // gpu_memory))  # integer ceil: no float drift
        gpus = quarters * FRACTION_STEP
        return LlmEstimate(gpus, need, source, f"{how} -> {gpus:g} of a {gib(gpu_memory)} GPU")
    n = math.ceil(need / (MULTI_GPU_USABLE * gpu_memory))
    return LlmEstimate(float(n), None, source,
                       f"{how} -> {n} GPUs of {gib(gpu_memory)} "
                       f"({MULTI_GPU_USABLE:.0%} of each counted on when split)")


def _formula(model: str, params: float, dtype: str, mode: str, need: int) -> str:
    p = f"{params / 1e9:.1f}B params" if params >= 1e9 else f"{params / 1e6:.0f}M params"
    if mode == "qlora":
        return f"{model}: {p} x 0.5 B (4-bit) x 1.3 (qlora) + 1 GiB = {gib(need)}"
    if mode == "full":
        return f"{model}: {p} x 16 B (mixed-precision Adam) x 1.2 (full) = {gib(need)}"
    bpp = BYTES_PER_PARAM[dtype.lower()]
    return (f"{model}: {p} x {bpp:g} B ({dtype}) x {_mode_factor(mode):g} ({mode}) "
            f"= {gib(need)}")


def _first(config: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        if config.get(k) is not None:
            return config[k]
    return None


def params_from_config(config: Mapping[str, Any], *, source: str = "config.json") -> float:
    """Parameter count of a decoder-only transformer from its Hugging Face ``config.json``.

    Per layer: attention q and o (h x h each), k and v (h x kv_heads x head_dim each), the
    MLP (3 x h x I when gated, as in Llama, Qwen, Mistral; 2 x h x I otherwise, as in GPT-2
    and GPT-NeoX; times the experts of a mixture), plus the embeddings and, unless tied,
    the output head. Norms and biases are left out (well under 0.1 %). Llama-2-7B's config
    gives 6.74B and Qwen2.5-7B's 7.62B, as published.
    """
    nested = config.get("text_config")
    if isinstance(nested, Mapping):  # multimodal wrappers keep the language model inside
        config = nested
    h = _first(config, "hidden_size", "n_embd", "d_model")
    layers = _first(config, "num_hidden_layers", "n_layer", "num_layers")
    vocab = _first(config, "vocab_size")
    missing = [name for name, v in (("hidden_size", h), ("num_hidden_layers", layers),
                                    ("vocab_size", vocab)) if not isinstance(v, int) or v <= 0]
    if missing:
        raise InvalidSpec(f"{source}: cannot count parameters without {', '.join(missing)}",
                          field="config")
    heads = _first(config, "num_attention_heads", "n_head") or 1
    kv_heads = _first(config, "num_key_value_heads") or heads
    head_dim = _first(config, "head_dim") or h // heads
    inter = _first(config, "intermediate_size", "n_inner", "ffn_dim") or 4 * h
    model_type = str(config.get("model_type", "")).lower()
    act = str(_first(config, "hidden_act", "activation_function") or "").lower()
    gated = model_type not in ("gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon") and (
        "silu" in act or "swiglu" in act or "gelu_pytorch_tanh" in act or "geglu" in act
        or model_type in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "mixtral",
                          "phi3"))
    experts = _first(config, "num_local_experts", "num_experts", "n_routed_experts") or 1
    attn = 2 * h * heads * head_dim + 2 * h * kv_heads * head_dim
    mlp = (3 if gated else 2) * h * inter * experts
    embed = vocab * h * (1 if config.get("tie_word_embeddings", model_type == "gpt2") else 2)
    return float(layers * (attn + mlp) + embed)
