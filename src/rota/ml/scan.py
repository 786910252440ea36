"""What a training or inference script needs, read from its code without running it.

``scan(source)`` parses the script with ``ast`` (nothing is imported or executed) and
notes what bears on its GPU needs, each with the line that says it:

- the frameworks it imports (torch, tensorflow, jax, transformers, lightning, ...);
- whether it uses a GPU: ``.cuda()``, ``device="cuda"``, ``.to("cuda:0")``,
  ``torch.device("cuda")``, ``device_map="auto"``;
- models it loads: the first argument of ``from_pretrained("org/name")`` (and
  ``pipeline(model="...")``), when it is a string constant;
- what it does with them: training (``.backward()``, ``optimizer.step()``, ``Trainer(``,
  ``.fit(``), LoRA (``peft``, ``LoraConfig``), 4-bit loading (``load_in_4bit=True``,
  ``BitsAndBytesConfig``), or only inference;
- several GPUs: ``torch.distributed``, ``DistributedDataParallel``, ``accelerate``,
  ``deepspeed``, ``device_map="auto"``;
- batch sizes given as constants (``batch_size=32``, ``per_device_train_batch_size=8``).

A script it cannot parse gives an error that names the line.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from rota.errors import InvalidSpec

FRAMEWORKS = {"torch": "PyTorch", "tensorflow": "TensorFlow", "jax": "JAX", "keras": "Keras",
              "transformers": "Hugging Face transformers", "lightning": "Lightning",
              "pytorch_lightning": "Lightning", "accelerate": "accelerate",
              "deepspeed": "DeepSpeed", "peft": "peft", "vllm": "vLLM"}
_GPU_FRAMEWORKS = {"torch", "tensorflow", "jax", "keras", "transformers", "lightning",
                   "pytorch_lightning", "vllm", "deepspeed", "accelerate"}
_MULTI = {"DistributedDataParallel", "init_process_group", "FullyShardedDataParallel",
          "Accelerator", "deepspeed"}
_TRAIN_CALLS = {"backward", "fit", "train"}
_BATCH_KEYS = {"batch_size", "per_device_train_batch_size", "per_device_eval_batch_size",
               "train_batch_size", "micro_batch_size"}


@dataclass
class ScriptFacts:
    frameworks: dict[str, int] = field(default_factory=dict)  # name -> first line
    gpu_uses: list[tuple[int, str]] = field(default_factory=list)
    models: list[tuple[int, str]] = field(default_factory=list)
    training: list[tuple[int, str]] = field(default_factory=list)
    lora: list[tuple[int, str]] = field(default_factory=list)
    four_bit: list[tuple[int, str]] = field(default_factory=list)
    multi_gpu: list[tuple[int, str]] = field(default_factory=list)
    batch_sizes: list[tuple[int, str, int]] = field(default_factory=list)

    @property
    def mode(self) -> str:
        """How the models are used, in the estimator's terms."""
        if self.four_bit and (self.lora or self.training):
            return "qlora"
        if self.lora:
            return "lora"
        if self.training:
            return "full"
        return "inference"

    @property
    def uses_gpu(self) -> bool:
        return bool(self.gpu_uses) or bool(set(self.frameworks) & _GPU_FRAMEWORKS
                                           and (self.models or self.training))


def scan(source: str, *, name: str = "script") -> ScriptFacts:
    try:
        tree = ast.parse(source, filename=name)
    except SyntaxError as e:
        raise InvalidSpec(f"{name}: line {e.lineno}: cannot be parsed as Python: {e.msg}",
                          field="script") from None
    facts = ScriptFacts()
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import | ast.ImportFrom):
            _imports(node, facts)
        elif isinstance(node, ast.Call):
            _call(node, line, facts)
        elif isinstance(node, ast.Attribute) and node.attr in _MULTI:
            facts.multi_gpu.append((line, node.attr))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and (node.value == "cuda" or node.value.startswith("cuda:"))):
            facts.gpu_uses.append((line, repr(node.value)))
    for key in ("gpu_uses", "models", "training", "lora", "four_bit", "multi_gpu",
                "batch_sizes"):
        getattr(facts, key).sort()
    return facts


def _imports(node: ast.Import | ast.ImportFrom, facts: ScriptFacts) -> None:
    names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
    for full in names:
        top = full.split(".")[0]
        if top in FRAMEWORKS:
            facts.frameworks.setdefault(top, node.lineno)
        if top == "peft":
            facts.lora.append((node.lineno, f"import {full}"))
        if full.startswith(("torch.distributed", "deepspeed", "accelerate")):
            facts.multi_gpu.append((node.lineno, f"import {full}"))
    if isinstance(node, ast.ImportFrom):
        for a in node.names:
            if a.name in ("LoraConfig", "get_peft_model"):
                facts.lora.append((node.lineno, a.name))
            if a.name == "BitsAndBytesConfig":
                facts.four_bit.append((node.lineno, a.name))


def _call(node: ast.Call, line: int, facts: ScriptFacts) -> None:
    fn = node.func
    name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
    if name == "cuda":
        facts.gpu_uses.append((line, ".cuda()"))
    if name in ("from_pretrained", "pipeline"):
        model = node.args[0] if node.args and name == "from_pretrained" else None
        for kw in node.keywords:
            if kw.arg in ("model", "pretrained_model_name_or_path"):
                model = kw.value
        if isinstance(model, ast.Constant) and isinstance(model.value, str):
            facts.models.append((line, model.value))
    if name in _TRAIN_CALLS or (name == "step" and _on(fn, "optim")):
        facts.training.append((line, f".{name}()"))
    if name in ("Trainer", "SFTTrainer", "Seq2SeqTrainer"):
        facts.training.append((line, f"{name}(...)"))
    if name in ("LoraConfig", "get_peft_model"):
        facts.lora.append((line, f"{name}(...)"))
    if name in _MULTI:
        facts.multi_gpu.append((line, f"{name}(...)"))
    for kw in node.keywords:
        value = kw.value
        if kw.arg in ("load_in_4bit", "load_in_8bit") and _true(value):
            facts.four_bit.append((line, f"{kw.arg}=True"))
        elif kw.arg in ("device", "device_map") and isinstance(value, ast.Constant):
            v = str(value.value)
            if v == "cuda" or v.startswith("cuda:") or v == "auto":
                facts.gpu_uses.append((line, f"{kw.arg}={v!r}"))
                if kw.arg == "device_map" and v == "auto":
                    facts.multi_gpu.append((line, "device_map='auto'"))
        elif kw.arg in _BATCH_KEYS and isinstance(value, ast.Constant) \
                and isinstance(value.value, int) and not isinstance(value.value, bool):
            facts.batch_sizes.append((line, kw.arg, value.value))


def _on(fn: ast.expr, word: str) -> bool:
    """``x.step()`` where x's name mentions ``word`` (``optimizer.step()``, ``optim.step``)."""
    target = fn.value if isinstance(fn, ast.Attribute) else None
    return isinstance(target, ast.Name) and word in target.id.lower()


def _true(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is True
