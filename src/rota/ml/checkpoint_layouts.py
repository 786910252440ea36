"""Where trainers put checkpoints by default, found under a job's working directory when
the job names no ``checkpoint_dir``.

Looked for in the working directory itself and in its sub-folders one level down:

- ``checkpoint-*/`` folders (the Hugging Face Trainer's ``output_dir``: ``.``, ``out``,
  ``runs``...: ``checkpoint-500/``, ``out/checkpoint-500/``);
- ``lightning_logs/version_*/checkpoints/*.ckpt`` (Lightning's default ``ModelCheckpoint``
  under its ``default_root_dir``);
- the checkpoint files and ``checkpoint-*`` folders inside a folder named ``checkpoints``,
  ``checkpoint``, ``ckpt``, ``ckpts`` or ``saved_models``.

The look is bounded, whatever the tree holds: at most ``MAX_ENTRIES`` entries are read per
folder, and of the working directory's sub-folders only the ``MAX_SUBDIRS`` most recently
changed are looked into (a folder's time changes when something is created in it, so the
one a trainer is writing into comes first). Hidden folders and the usual bulky ones
(``.git``, ``node_modules``, ``wandb``, ``data``...) are skipped.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator

MAX_ENTRIES = 1_000
MAX_SUBDIRS = 50
CHECKPOINT_FOLDERS = frozenset({"checkpoints", "checkpoint", "ckpt", "ckpts", "saved_models"})
_SKIP = frozenset({"node_modules", "__pycache__", "wandb", "mlruns", "data", "datasets",
                   "site-packages", "venv", "env"})


def discover(cwd: str, file_patterns: tuple[str, ...], dir_patterns: tuple[str, ...]
             ) -> list[str]:
    """Paths of likely checkpoints under ``cwd`` in the layouts above (not yet checked)."""
    top = list(_entries(cwd))
    subdirs = sorted((e for e in top if _dir(e) and e.name not in _SKIP),
                     key=_mtime, reverse=True)[:MAX_SUBDIRS]
    found = _in_base(top, file_patterns, dir_patterns)
    for sub in subdirs:
        found += _in_base(list(_entries(sub.path)), file_patterns, dir_patterns)
    return found


def _in_base(entries: list[os.DirEntry[str]], file_patterns: tuple[str, ...],
             dir_patterns: tuple[str, ...]) -> list[str]:
    found: list[str] = []
    for e in entries:
        if not _dir(e):
            continue
        if _matches(e.name, dir_patterns):
            found.append(e.path)
        elif e.name in CHECKPOINT_FOLDERS:
            found += [c.path for c in _entries(e.path)
                      if _matches(c.name, dir_patterns if _dir(c) else file_patterns)]
        elif e.name == "lightning_logs":
            for version in _entries(e.path):
                if version.name.startswith("version_") and _dir(version):
                    found += [c.path for c in _entries(os.path.join(version.path, "checkpoints"))
                              if c.name.endswith(".ckpt")]
    return found


def _entries(path: str) -> Iterator[os.DirEntry[str]]:
    """A folder's first MAX_ENTRIES entries, hidden ones left out; none if unreadable."""
    try:
        with os.scandir(path) as it:
            for n, e in enumerate(it):
                if n >= MAX_ENTRIES:
                    return
                if not e.name.startswith("."):
                    yield e
    except OSError:
        return


def _dir(e: os.DirEntry[str]) -> bool:
    try:
        return e.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _mtime(e: os.DirEntry[str]) -> float:
    try:
        return e.stat(follow_symlinks=False).st_mtime
    except OSError:
        return 0.0


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)
