"""Shared fixtures: a real daemon in a subprocess, on simulated GPUs, in a temp ROTA_HOME."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rota_testing import DaemonProcess, kill_job_processes

# The suite runs as root, so its daemons can start jobs as any account, and would refuse
# the jobs of token users who have no Unix account (rota.server.access.accounts). Tests of the API's
# rights use such users; they run with every user's jobs under the daemon's account, as a
# daemon's admin may choose. tests/integration/test_multi_user.py sets it back to false.
os.environ.setdefault("ROTA_SHARED_ACCOUNT", "true")

#: Tests that share something of the machine's run in one xdist worker, one after another
#: (scripts/test.sh runs the suite in workers): the private engines (Slurm's daemons, a Ray
#: cluster's /tmp/ray, dockerd's bridge) and the real Unix accounts (fixed names, made and
#: removed by each test). Any other test file is a group of its own, so its module-scoped
#: fixtures are made once.
_SHARED_GROUPS = (
    ("tests/backends/slurm/", "engines"),
    ("tests/backends/ray/", "engines"),
    ("tests/backends/container/", "engines"),
    ("tests/backends/engine_backend/", "engines"),
    ("tests/contract/", "engines"),
    ("tests/integration/test_multi_user", "unix-accounts"),
    ("tests/storage/test_owner_files.py", "unix-accounts"),
)


#: Scheduled first (the longest units, so that none is left running alone at the end: the
#: engines' group takes minutes in one worker), in this order; the rest as collected; the
#: dashboard's files last.
_FIRST = (
    "tests/backends/slurm/", "tests/backends/ray/", "tests/backends/container/",
    "tests/backends/engine_backend/", "tests/contract/",
    "tests/pipeline/test_pipeline_rounds.py", "tests/integration/test_schemathesis.py",
    "tests/integration/test_multi_user", "tests/storage/test_owner_files.py",
    "tests/pipeline/test_pipeline_remote.py", "tests/integration/test_templates",
    "tests/eval/test_eval_", "tests/integration/test_crash.py",
    "tests/eval/test_template_harness.py", "tests/integration/test_pipelines_daemon.py",
)
_LAST = ("tests/ui/",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The order above (stable: a file's tests stay together, in their order)."""
    def rank(item: pytest.Item) -> tuple[int, int]:
        path = item.nodeid.split("::", 1)[0]
        first = next((n for n, prefix in enumerate(_FIRST) if path.startswith(prefix)), None)
        if first is not None:
            return (0, first)
        return (2, 0) if path.startswith(_LAST) else (1, 0)

    items.sort(key=rank)


def _group_of(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return next((g for prefix, g in _SHARED_GROUPS if path.startswith(prefix)), path)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: absent without xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scope scheduling, a scope being a group above, handed out in the order
    above. (``--dist loadgroup`` cannot do it with pytest 9: it renames test ids, which
    pytest 9 no longer lets a plugin do.)"""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # the order of pytest_collection_modifyitems

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group_of(nodeid)

    return ByGroup(config, log)


@pytest.fixture
def daemon_factory(tmp_path: Path) -> Iterator[type[DaemonProcess]]:
    made: list[DaemonProcess] = []

    class Factory(DaemonProcess):
        def __init__(self, simulate: str | None = "4x24G", home: Path | None = None,
                     **kw: object) -> None:
            super().__init__(home or tmp_path / "home", simulate, **kw)  # type: ignore[arg-type]
            made.append(self)

    yield Factory
    for d in made:
        d.stop()
        kill_job_processes(d.home)


@pytest.fixture
def daemon(daemon_factory: type[DaemonProcess]) -> DaemonProcess:
    return daemon_factory().start()
