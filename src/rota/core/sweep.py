"""Parameter sweeps: one spec and a grid of values -> one job per combination.

``--sweep lr=1e-3,3e-4 --sweep seed=1..3`` runs 6 jobs. A ``{key}`` placeholder in the
command takes the value where the user wants it; a key used by no placeholder is passed as
``--key value``. Pure: specs in, specs out.
"""

from __future__ import annotations

import itertools
import math
import re
import shlex
from typing import Any

from rota.core.spec import JobSpec, parse_spec
from rota.errors import InvalidSpec
from rota.words import split_words

MAX_COMBINATIONS = 10_000
_NAME_MAX = 200  # JobSpec.name's limit

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_INT_RANGE = re.compile(r"(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?")
# Something that looks like a range but is not an integer one (1e-3..1e-1, 0.1..0.5).
_NUMERIC_RANGE = re.compile(r"[-+]?[\d.eE+\-]*\d\.\.[-+]?[\d.eE+\-]+")


def _error(text: str, why: str) -> InvalidSpec:
    return InvalidSpec(f"sweep {text!r}: {why}", field="sweep")


def _range(text: str, part: str, m: re.Match[str]) -> list[str]:
    start, stop = int(m.group(1)), int(m.group(2))
    step = int(m.group(3)) if m.group(3) is not None else 1
    if step <= 0:
        raise _error(text, f"the step of {part!r} must be a positive whole number")
    if stop < start:
        raise _error(text, f"range {part!r} runs backwards (write it low..high)")
    if (stop - start) // step + 1 > MAX_COMBINATIONS:
        raise _error(text, f"range {part!r} has more than {MAX_COMBINATIONS:,} values")
    return [str(v) for v in range(start, stop + 1, step)]


def parse_sweep_arg(text: str) -> tuple[str, list[str]]:
    """``key=v1,v2`` / ``key=1..5`` (inclusive) / ``key=0..10..2`` -> (key, values).

    Parts may be mixed (``seed=1..3,10``); values are kept as the user wrote them (strings),
    so ``1e-3`` stays ``1e-3`` in the command and the job name.
    """
    key, sep, rest = text.partition("=")
    key = key.strip()
    if not sep:
        raise _error(text, "expected key=values, like lr=1e-3,3e-4 or seed=1..5")
    if not _KEY.fullmatch(key):
        raise _error(text, f"{key!r} is not a valid key (letters, digits, _ . -)")
    values: list[str] = []
    for raw in rest.split(","):
        part = raw.strip()
        if not part:
            raise _error(text, "empty value (two commas in a row, or nothing after '=')")
        m = _INT_RANGE.fullmatch(part)
        if m:
            values.extend(_range(text, part, m))
        elif _NUMERIC_RANGE.fullmatch(part):
            raise _error(text, f"{part!r}: only whole-number ranges (a..b or a..b..step); "
                               "list other values with commas")
        else:
            values.append(part)
        if len(values) > MAX_COMBINATIONS:
            raise _error(text, f"more than {MAX_COMBINATIONS:,} values")
    seen: set[str] = set()
    for v in values:
        if v in seen:
            raise _error(text, f"value {v!r} appears twice")
        seen.add(v)
    return key, values


def _check_grid(grid: list[tuple[str, list[str]]]) -> None:
    seen: set[str] = set()
    for key, values in grid:
        if key in seen:
            raise InvalidSpec(f"sweep: key {key!r} is given twice", field="sweep")
        seen.add(key)
        if not values:
            raise InvalidSpec(f"sweep: key {key!r} has no values", field="sweep")
        if any("\x00" in v for v in values):
            raise InvalidSpec(f"sweep: a value of {key!r} contains a NUL byte", field="sweep")
    total = math.prod(len(values) for _, values in grid)
    if total > MAX_COMBINATIONS:
        sizes = " x ".join(str(len(v)) for _, v in grid)
        raise InvalidSpec(f"sweep: {sizes} = {total:,} combinations, more than the limit of "
                          f"{MAX_COMBINATIONS:,}", field="sweep")


# Words that run the program rather than name it: `python train.py` is "train".
_LAUNCHERS = frozenset({"python", "python3", "python2", "bash", "sh", "zsh", "env", "uv", "uvx",
                        "run", "torchrun", "accelerate", "launch", "deepspeed", "srun",
                        "nohup", "exec", "time", "conda", "poetry", "pipenv", "pdm"})
_BASE_MAX = 40
_SCRIPT = re.compile(r"(.+)\.(?:py|sh|bash)")


def default_base_name(command: list[str], *, shell: bool = False) -> str:
    """A short name for a job with none: the script or module it runs, without its folder
    or suffix (`python ./scripts/train.py --lr 3` -> `train`, `python -m pkg.eval` ->
    `eval`); else the first word that is not a launcher or an option (`echo`)."""
    words = list(command)
    if shell and len(words) == 1:
        try:
            words = split_words(words[0])
        except ValueError:
            words = words[0].split()
    for i, word in enumerate(words):
        if word == "-m" and i + 1 < len(words):
            return words[i + 1].rsplit(".", 1)[-1][:_BASE_MAX] or "job"
        m = _SCRIPT.fullmatch(word.rsplit("/", 1)[-1])
        if m:
            return m.group(1)[:_BASE_MAX]
    for word in words:
        stem = word.rstrip("/").rsplit("/", 1)[-1]
        if stem and not stem.startswith("-") and "=" not in stem \
                and re.sub(r"[\d.]+$", "", stem) not in _LAUNCHERS:
            return stem[:_BASE_MAX]
    return (words[0].rsplit("/", 1)[-1] if words else "")[:_BASE_MAX] or "job"


def _job_name(base: str, combo: dict[str, str]) -> str:
    suffix = "[" + ",".join(f"{k}={v}" for k, v in combo.items()) + "]"
    room = _NAME_MAX - len(suffix)
    return (base[:room] + suffix) if room > 0 else (base + suffix)[:_NAME_MAX]


def expand_sweep(spec: JobSpec, grid: list[tuple[str, list[str]]]) -> list[JobSpec]:
    """One validated JobSpec per combination, cartesian product in the grid's key order.

    ``{key}`` placeholders are replaced literally (not ``str.format``, so braces in JSON
    arguments are left alone). For a ``shell=true`` job the value is shell-quoted first, so a
    sweep value can never become shell syntax (invariant 4). An empty grid gives ``[spec]``.
    """
    _check_grid(grid)
    if not grid:
        return [spec]
    keys = [k for k, _ in grid]
    used = [k for k in keys if any("{" + k + "}" in arg for arg in spec.command)]
    # One pass over each argument, so a value that contains "{other}" is not substituted again.
    pattern = re.compile("|".join(re.escape("{" + k + "}") for k in used)) if used else None
    used_set = set(used)
    base = spec.name or default_base_name(spec.command, shell=spec.shell)
    template: dict[str, Any] = spec.model_dump()
    out: list[JobSpec] = []
    for values in itertools.product(*(v for _, v in grid)):
        combo = dict(zip(keys, values, strict=True))
        name = _job_name(base, combo)
        command = _command(spec, combo, pattern, used_set)
        out.append(parse_spec({**template, "command": command, "name": name}, where=name))
    return out


def _command(spec: JobSpec, combo: dict[str, str], pattern: re.Pattern[str] | None,
             used: set[str]) -> list[str]:
    quote = shlex.quote if spec.shell else str
    command = list(spec.command)
    if pattern is not None:
        command = [pattern.sub(lambda m: quote(combo[m.group(0)[1:-1]]), arg)
                   for arg in command]
    extra = [(f"--{k}", v) for k, v in combo.items() if k not in used]
    if spec.shell:
        return [command[0] + "".join(f" {flag} {shlex.quote(v)}" for flag, v in extra)]
    return command + [x for pair in extra for x in pair]
