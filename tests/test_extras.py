"""The extras the docs tell people to install bring what the docs then run."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).parent.parent


def _extras() -> dict[str, set[str]]:
    """Each extra with the names of the packages it requires."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {name: {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower() for r in reqs}
            for name, reqs in data["project"]["optional-dependencies"].items()}


def test_mlflow_ui_comes_with_the_extra_the_docs_name_for_it() -> None:
    """rota[trackers] brings mlflow-skinny, which has no UI or server (`mlflow ui`: no
    module named 'flask'): the docs name the extra with the full mlflow for browsing."""
    extras = _extras()
    assert "mlflow" not in extras["trackers"] and "mlflow-skinny" in extras["trackers"]
    assert [x for x, names in extras.items() if "mlflow" in names] == ["mlflow-ui"]
    text = " ".join((ROOT / "docs" / "trackers.md").read_text().split())
    assert "browse it with `mlflow ui --backend-store-uri sqlite:///$ROTA_HOME/mlflow.db` " \
           "(after `pip install 'rota[mlflow-ui]'`)" in text
