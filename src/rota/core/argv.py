"""Telling a job which GPUs it got: a ``--cuda`` argument and ``CUDA_VISIBLE_DEVICES``.

Pure: argv lists in, argv lists out (invariant 4: no shell strings are built here).
Programs written for the original tool read ``--cuda 0,1``; others read the environment.
"""

from __future__ import annotations

from collections.abc import Sequence

_FLAG = "--cuda"


def _gpu_list(gpu_ids: Sequence[int]) -> str:
    for i in gpu_ids:
        if i < 0:
            raise ValueError(f"GPU ids cannot be negative: {list(gpu_ids)}")
    return ",".join(str(i) for i in gpu_ids)


def cuda_visible_devices(gpu_ids: Sequence[int]) -> str:
    """Value for ``CUDA_VISIBLE_DEVICES``, order kept (the first id becomes device 0).

    An empty list gives ``""``, which hides every GPU: right for a CPU-only job.
    """
    return _gpu_list(gpu_ids)


def inject_cuda_arg(argv: Sequence[str], gpu_ids: Sequence[int]) -> list[str]:
    """Return argv with ``--cuda <ids>`` set to ``gpu_ids`` (a new list; argv is not changed).

    Every existing ``--cuda X`` / ``--cuda=X`` gets the new value (argparse keeps the last
    one, so none may be left stale); without one, ``--cuda 0,1`` is appended. Only the part
    before a ``--`` separator is searched, and a new flag goes before it, since what follows
    ``--`` is positional. A bare ``--cuda`` followed by another option (or nothing) gets the
    value inserted after it. With no GPUs (a CPU-only job) argv is returned unchanged.
    """
    out = list(argv)
    if not gpu_ids:
        return out
    value = _gpu_list(gpu_ids)
    end = out.index("--", 1) if "--" in out[1:] else len(out)
    found = False
    i = 1
    while i < end:
        arg = out[i]
        if arg.startswith(_FLAG + "="):
            out[i] = f"{_FLAG}={value}"
            found = True
        elif arg == _FLAG:
            found = True
            if i + 1 < end and not out[i + 1].startswith("--"):
                out[i + 1] = value
            else:
                out.insert(i + 1, value)
                end += 1
            i += 1
        i += 1
    if not found:
        out[end:end] = [_FLAG, value]
    return out


#: The placeholder a job's argv may hold for the checkpoint to resume from.
CHECKPOINT = "{checkpoint}"


def substitute_checkpoint(argv: Sequence[str], path: str | None) -> list[str]:
    """``{checkpoint}`` in argv replaced by ``path``; with no checkpoint it is dropped cleanly.

    With a path, every occurrence is replaced, inside a word too (``--resume={checkpoint}``).
    Without one (a first attempt, or nothing saved yet): a word that is only the placeholder
    goes, and so does the option right before it (``--resume {checkpoint}``); a word that
    holds it with more text (``--resume={checkpoint}``) goes whole. Other words stay.
    """
    if path is not None:
        return [a.replace(CHECKPOINT, path) for a in argv]
    out: list[str] = []
    for arg in argv:
        if arg == CHECKPOINT:
            if len(out) > 1 and out[-1].startswith("-") and "=" not in out[-1]:
                out.pop()  # its flag: `--resume {checkpoint}` goes together
            continue
        if CHECKPOINT in arg:
            continue
        out.append(arg)
    return out
