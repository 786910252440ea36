"""Instruction data for the ``lora-finetune`` and ``eval-heldout`` templates: reading JSON
lines, the Alpaca prompt, tokens with the prompt masked out of the loss, and batches.

A line is ``{"instruction": ..., "input": ... (optional), "output": ...}``, or (where
``allow_text``) ``{"text": ...}``: plain text whose every token is scored. Reading needs
only the standard library, so a bad file is refused before torch is even imported.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

PROMPT_WITH_INPUT = (
    "Below is an instruction that describes a task, paired with an input that provides "
    "further context. Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n")
PROMPT_NO_INPUT = (
    "Below is an instruction that describes a task. Write a response that appropriately "
    "completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n")
IGNORE = -100  # the label PyTorch's cross-entropy skips


class DataError(ValueError):
    """The data file is missing or one of its lines is not usable; the message says where."""


@dataclass(frozen=True)
class Record:
    prompt: str  # context the loss does not score ("" for a text line)
    target: str  # what the loss scores
    eos: bool  # an end-of-sequence token closes the target (a response ends; a text may not)


def shipped(name: str) -> str:
    """The path of a data file that ships with Rota (``rota/templates/data/NAME``)."""
    return str(resources.files("rota.templates").joinpath("data", name))


def prompt_of(instruction: str, context: str = "") -> str:
    if context.strip():
        return PROMPT_WITH_INPUT.format(instruction=instruction, input=context)
    return PROMPT_NO_INPUT.format(instruction=instruction)


def read_jsonl(path: str, *, allow_text: bool = False) -> list[Record]:
    """Every record of a JSON-lines file; the first bad line is an error naming it."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"data file {path} does not exist" if not p.exists()
                        else f"data file {path} is not a file")
    records = []
    try:
        with p.open(encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    records.append(_record(line, allow_text, f"{path} line {n}"))
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e})") from None
    if not records:
        raise DataError(f"{path}: no records (JSON lines with instruction and output"
                        + (", or text" if allow_text else "") + ")")
    return records


def _record(line: str, allow_text: bool, where: str) -> Record:
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise DataError(f"{where}: not JSON ({e})") from None
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if allow_text and "text" in obj and "instruction" not in obj:
        if not isinstance(obj["text"], str) or not obj["text"].strip():
            raise DataError(f"{where}: 'text' must be a non-empty string")
        return Record("", obj["text"], eos=False)
    wanted = "'instruction' and 'output'" + (" (or 'text')" if allow_text else "")
    for key in ("instruction", "output"):
        if not isinstance(obj.get(key), str) or not obj[key].strip():
            raise DataError(f"{where}: needs {wanted} as non-empty strings; "
                            f"{key!r} is {'missing' if key not in obj else 'not one'}")
    context = obj.get("input", "")
    if context is None:
        context = ""
    if not isinstance(context, str):
        raise DataError(f"{where}: 'input' must be a string")
    return Record(prompt_of(obj["instruction"], context), obj["output"], eos=True)


def encode(tokenizer: Any, record: Record, max_len: int) -> dict[str, list[int]] | None:
    """Token ids and labels, the prompt's labels IGNORE, cut at ``max_len`` tokens; None
    when the prompt leaves no target token inside ``max_len``.

    Prompt and target are tokenized apart and joined, so the mask falls exactly on the
    boundary (tokenizing the joined text may merge across it)."""
    prompt = tokenizer(record.prompt, add_special_tokens=True)["input_ids"]
    target = tokenizer(record.target, add_special_tokens=False)["input_ids"]
    if record.eos and tokenizer.eos_token_id is not None:
        target = [*target, tokenizer.eos_token_id]
    ids = (prompt + target)[:max_len]
    labels = ([IGNORE] * len(prompt) + target)[:max_len]
    # the first token is never predicted (nothing comes before it)
    if all(t == IGNORE for t in labels[1:]):
        return None
    return {"input_ids": ids, "labels": labels}


def encode_all(tokenizer: Any, records: list[Record], max_len: int
               ) -> tuple[list[dict[str, list[int]]], int]:
    """The encoded records, and how many were left out (no target token within max_len)."""
    out = [e for e in (encode(tokenizer, r, max_len) for r in records) if e is not None]
    return out, len(records) - len(out)


class Collator:
    """Pads a batch on the right to its longest example (a multiple of ``multiple_of``
    where given: tensor cores like multiples of 8); padding is masked and not scored."""

    def __init__(self, pad_id: int, multiple_of: int | None = None) -> None:
        self.pad_id, self.multiple_of = pad_id, multiple_of

    def __call__(self, batch: list[dict[str, list[int]]]) -> dict[str, Any]:
        import torch

        width = max(len(b["input_ids"]) for b in batch)
        if self.multiple_of:
            width = -(-width // self.multiple_of) * self.multiple_of
        ids, labels, mask = [], [], []
        for b in batch:
            pad = width - len(b["input_ids"])
            ids.append(b["input_ids"] + [self.pad_id] * pad)
            labels.append(b["labels"] + [IGNORE] * pad)
            mask.append([1] * len(b["input_ids"]) + [0] * pad)
        return {"input_ids": torch.tensor(ids), "labels": torch.tensor(labels),
                "attention_mask": torch.tensor(mask)}
