"""An error answer becomes the error its ``title`` names (a 503 is a store's failure or an
unreachable daemon), and the CLI's --json names that kind."""

from __future__ import annotations

import json

import pytest

from rota.cli.common import run_cli
from rota.cli.lazy_typer import Exit
from rota.client._endpoint import error_from
from rota.errors import Conflict, DaemonUnavailable, RotaError, StoreError

FULL = "could not write to the database: the disk holding /h/rota.db is full"


def _problem(status: int, title: str, detail: str) -> bytes:
    return json.dumps({"type": "about:blank", "title": title, "status": status,
                       "detail": detail}).encode()


def test_a_store_error_comes_back_as_a_store_error() -> None:
    got = error_from(503, _problem(503, "StoreError", FULL))
    assert type(got) is StoreError and str(got) == FULL


def test_other_kinds_by_title_or_by_status() -> None:
    assert type(error_from(503, _problem(503, "DaemonUnavailable", "x"))) is DaemonUnavailable
    assert type(error_from(503, b"no json")) is DaemonUnavailable
    assert type(error_from(409, _problem(409, "IllegalTransition", "x"))) is Conflict
    # a title whose status does not match is not believed
    assert type(error_from(500, _problem(500, "StoreError", "x"))) is RotaError


def test_the_cli_names_the_store_error_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(Exit) as code, run_cli(json_out=True):
        raise error_from(503, _problem(503, "StoreError", FULL))
    assert code.value.exit_code == 3
    assert json.loads(capsys.readouterr().out) == {"error": "StoreError", "message": FULL,
                                                   "field": None}
