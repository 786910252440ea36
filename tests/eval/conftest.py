"""Fixtures of the evaluation tests: a tiny Llama (built here, nothing downloaded) and the
tiny_mc task on local JSON lines."""

from __future__ import annotations

from pathlib import Path

import pytest
from eval_testing import write_task


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from hf_testing import build_tiny_llama  # torch: only for the tests that ask for it

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    return write_task(tmp_path / "tasks")
