"""A job's own reason for failing (rota.job.fail_reason) read back from its log's tail
(rota.ml.stated): the last such line of the attempt counts, an earlier attempt's does not."""

from __future__ import annotations

import pytest

from rota import job
from rota.ml.stated import MAX_REASON, stated_reason


def test_the_line_fail_reason_prints_is_read_back(capsys: pytest.CaptureFixture[str]) -> None:
    line = job.fail_reason("no results for task x\n  (see raw/)\n")
    assert line == "rota: FAILED: no results for task x; (see raw/)"
    err = capsys.readouterr().err
    assert err == line + "\n"
    assert stated_reason(f"loading...\n{err}".encode()) == "no results for task x; (see raw/)"
    eval_line = job.fail_reason("lm_eval exited with status 1", program="eval")
    assert eval_line == "rota-eval: FAILED: lm_eval exited with status 1"
    assert stated_reason(eval_line.encode()) == "lm_eval exited with status 1"


def test_a_program_name_rota_would_not_read_is_refused() -> None:
    with pytest.raises(ValueError, match="lowercase"):
        job.fail_reason("x", program="My Tool")


@pytest.mark.parametrize(("tail", "reason"), [
    (b"rota: FAILED: first\nmore output\nrota: FAILED: second\r\nbye\n", "second"),
    (b"=== rota: job 3 attempt 1 on GPU 0\nrota: FAILED: old\n"
     b"=== rota: job 3 attempt 2 on GPU 0\nTraceback ...\n", None),  # an earlier attempt's
    (b"=== rota: job 3 attempt 2 on GPU 0\nrota: FAILED: now\n", "now"),
    (b"FAILED tests/test_x.py::test_y - AssertionError\n", None),  # pytest's, not ours
    (b"myrota: FAILED: no\n  rota: FAILED: indented\n", None),
    (b"rota: FAILED: \n", None),
    (b"", None),
])
def test_only_the_attempts_own_last_line_counts(tail: bytes, reason: str | None) -> None:
    assert stated_reason(tail) == reason


def test_a_long_reason_is_cut() -> None:
    got = stated_reason(b"rota: FAILED: " + b"x" * 5000)
    assert got is not None and len(got) == MAX_REASON and got.endswith("…")
