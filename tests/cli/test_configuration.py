"""docs/configuration.md lists every setting of rota.config.Settings, and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

from rota.config import Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def _documented() -> dict[str, str]:
    rows = re.findall(r"^\| `([a-z_]+)` \| ([^|]+) \|", DOC.read_text(), re.M)
    return {key: default.strip() for key, default in rows}


def test_every_setting_is_documented_and_nothing_else() -> None:
    documented = _documented()
    assert set(documented) == set(Settings.model_fields)


def test_documented_plain_defaults_match_the_code() -> None:
    for key, default in _documented().items():
        value = Settings.model_fields[key].default
        if isinstance(value, bool):
            assert default == f"`{str(value).lower()}`", key
        elif isinstance(value, int | float | str):
            assert default == f"`{value}`", key
