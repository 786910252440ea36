"""A step's result file: written whole or not at all (aside, fsync, rename), readable by
its owner only (a data step's result holds presigned URLs: credentials)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_private(path: Path, value: Any) -> None:
    aside = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(value, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(aside, path)
