"""`rota submit -f`: the specs go to the daemon unchecked, yet every bad one is reported on
its line, worded as the jobs-file watcher words it, and every good one is queued once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rota.jobsfile import parse_jobs_text


def _counting_requests(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of specs in each POST /v1/jobs this process sends from now on."""
    from rota.client.raw import RawClient

    sent: list[int] = []
    post = RawClient.submit_full

    def counting(self: RawClient, jobs: list[dict[str, Any]], **kw: Any) -> Any:
        sent.append(len(jobs))
        return post(self, jobs, **kw)

    monkeypatch.setattr(RawClient, "submit_full", counting)
    return sent


def test_a_big_file_goes_in_chunks_and_keeps_its_line_numbers(
        rota: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each request is all or nothing on the daemon's side: an item it rejects in a later
    chunk is still reported on its own line, and every other item is queued once."""
    from rota.cli import submit_file

    monkeypatch.setattr(submit_file, "FILE_CHUNK", 4)
    sent = _counting_requests(monkeypatch)
    f = tmp_path / "jobs.yaml"
    lines = ["jobs:"] + [f"  - {{command: 'true', gpus: 0, hold: true, name: chunk{i}}}"
                         for i in range(9)]
    lines[6] = "  - {command: 'true', gpus: 0, hold: true, cwd: /no/such/dir}"  # job 6
    f.write_text("\n".join(lines) + "\n")
    r = rota("submit", "-f", str(f), "--json")
    assert r.exit_code == 2
    out = json.loads(r.stdout)
    assert [e["line"] for e in out["errors"]] == [7]
    assert "cwd" in out["errors"][0]["message"]
    assert not out["errors"][0]["message"].startswith("jobs[")
    assert [j["name"] for j in out["jobs"]] == [f"chunk{i}" for i in range(9) if i != 5]
    # 4 (jobs 1-4), then jobs 5-8, then again without job 6 (rejected), then job 9
    assert sent == [4, 4, 3, 1]
    for j in out["jobs"]:
        rota("cancel", str(j["id"]))


def _submit(rota: Any, f: Path) -> dict[str, Any]:
    r = rota("submit", "-f", str(f), "--json")
    out: dict[str, Any] = json.loads(r.stdout)
    for j in out["jobs"]:
        rota("cancel", str(j["id"]))
    assert r.exit_code == (2 if out.get("errors") else 0), r.output
    return out


def _watcher_errors(f: Path) -> list[dict[str, Any]]:
    parsed = parse_jobs_text(f.read_text(), fmt="yaml", source=str(f))
    return [{"line": e.line, "message": e.message} for e in parsed.errors]


def test_bad_specs_are_worded_as_the_watcher_words_them(
        rota: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first bad spec comes back from the daemon; from then on the rest of the file is
    checked here, so the later bad ones cost no request each."""
    from rota.cli import submit_file

    monkeypatch.setattr(submit_file, "FILE_CHUNK", 3)
    sent = _counting_requests(monkeypatch)
    good = "- {command: 'true', gpus: 0, hold: true, name: ok%d}\n"
    f = tmp_path / "jobs.yaml"
    f.write_text(good % 1 + good % 2 + good % 3
                 + "- command: 'true'\n  gpus: 0\n  hold: true\n  priority: high\n"
                 + good % 5
                 + "- {command: 'true', gpus: -1, retries: -2}\n"  # two bad fields
                 + "- {command: 'true', gpus: 0, hold: maybe}\n"
                 + good % 8)
    out = _submit(rota, f)
    assert [j["name"] for j in out["jobs"]] == ["ok1", "ok2", "ok3", "ok5", "ok8"]
    assert out["errors"] == _watcher_errors(f)
    lines = [e["line"] for e in out["errors"]]
    assert lines == [7, 9, 10]  # priority's own line; the one-line items' lines
    assert out["errors"][0]["message"].startswith("job 4 (from line 4): priority: ")
    both = out["errors"][1]["message"]
    assert both.startswith("job 6: gpus: ") and "; retries: " in both
    # jobs 1-3; jobs 4-6, refused for job 4: everything left is checked here (jobs 4, 6
    # and 7 are bad); job 5 again; job 8
    assert sent == [3, 3, 1, 1]


def test_a_value_json_cannot_carry_is_checked_here(rota: Any, tmp_path: Path) -> None:
    """YAML reads `name: 2024-01-01` as a date: the spec model words what is wrong, as it
    did before the specs went unchecked (JSON could not even carry it)."""
    f = tmp_path / "jobs.yaml"
    f.write_text("- {command: 'true', gpus: 0, hold: true, name: fine}\n"
                 "- {command: 'true', gpus: 0, hold: true, name: 2024-01-01}\n"
                 "- {command: 'true', gpus: 0, hold: true, 3: x}\n")
    out = _submit(rota, f)
    assert [j["name"] for j in out["jobs"]] == ["fine"]
    assert out["errors"] == _watcher_errors(f)
    assert [e["line"] for e in out["errors"]] == [2, 3]
    assert "name" in out["errors"][0]["message"]


def test_every_spec_bad_prints_no_submitted_line(rota: Any, tmp_path: Path) -> None:
    f = tmp_path / "jobs.yaml"
    f.write_text("- {command: 'true', gpus: -1}\n- {command: 'true', gpus: lots}\n")
    r = rota("submit", "-f", str(f))
    assert r.exit_code == 2
    assert r.stdout == ""
    assert f"{f}:1: job 1: gpus: " in r.stderr and f"{f}:2: job 2: gpus: " in r.stderr


def test_the_line_format_goes_the_same_way(rota: Any, tmp_path: Path) -> None:
    """A line the reader refuses, and one only the daemon refuses (no GPU 7 here)."""
    f = tmp_path / "jobs.txt"
    f.write_text("0,true,,,\n1,true,,--x 1,7\nx,true,,,\n")
    out = _submit(rota, f)
    assert len(out["jobs"]) == 1
    parsed = parse_jobs_text(f.read_text(), fmt="csv", source=str(f))
    [unreadable] = [{"line": e.line, "message": e.message} for e in parsed.errors]
    assert out["errors"][1] == unreadable
    assert [e["line"] for e in out["errors"]] == [2, 3]
    assert "7" in out["errors"][0]["message"] and "jobs[" not in out["errors"][0]["message"]


def test_a_relative_cwd_is_made_absolute_here(rota: Any, daemon: Any, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    f = tmp_path / "jobs.yaml"
    f.write_text("- {command: 'true', gpus: 0, hold: true, cwd: sub}\n"
                 "- {command: 'true', gpus: 0, hold: true}\n")
    r = rota("submit", "-f", str(f), "--json", cwd=tmp_path)
    assert r.exit_code == 0, r.output
    ids = [j["id"] for j in json.loads(r.stdout)["jobs"]]
    try:
        cwds = [daemon.client.job(i)["spec"]["cwd"] for i in ids]
        assert cwds == [str(tmp_path / "sub"), str(tmp_path)]
    finally:
        for i in ids:
            daemon.client.cancel(i)


def test_files_that_broke_the_cli_get_errors_on_their_lines(rota: Any, tmp_path: Path) -> None:
    """Each died with a traceback or hung: now a FILE:LINE: error, the rest still queued."""
    from tests.test_jobsfile import BILLION_LAUGHS

    held = "{command: ['true'], gpus: 0, hold: true}"
    bomb = BILLION_LAUGHS.replace("command: [fine]", held).replace("command: [also-fine]", held)
    cases = {
        "bad-utf8.txt": (b"0,true,,--x 1,\n0,true,,--x \xff,\n", 2, "not valid UTF-8"),
        "big.txt": (b"0,true,,,\n" + b"9" * 5000 + b",true,,,\n", 2, "5,000 digits"),
        "bomb.yaml": (bomb.encode(), 2, "YAML aliases"),
        "comma.json": (b'[{"command": ["true"], "gpus": 0, "hold": true},\n]\n', 2,
                       "no trailing comma"),
    }
    for name, (data, line, words) in cases.items():
        f = tmp_path / name
        f.write_bytes(data)
        r = rota("submit", "-f", str(f), "--json")
        assert r.exit_code == 2, (name, r.output)
        out = json.loads(r.stdout)
        for j in out["jobs"]:
            rota("cancel", str(j["id"]))
        assert len(out["errors"]) == 1, (name, out["errors"])
        error = out["errors"][0]
        assert error["line"] == line and words in error["message"], (name, error)
        assert len(out["jobs"]) == (0 if name.endswith(".json") else 1 if name != "bomb.yaml"
                                    else 2), (name, out["jobs"])


def test_a_byte_order_mark_is_not_read_as_part_of_the_first_field(
        rota: Any, tmp_path: Path) -> None:
    f = tmp_path / "jobs.txt"
    f.write_bytes("\ufeff5,true,,,\n".encode())
    out = _submit(rota, f)
    assert "errors" not in out and out["jobs"][0]["priority"] == 5


def test_specs_the_daemon_refuses_are_not_called_duplicates(rota: Any, tmp_path: Path) -> None:
    """Every spec refused by the daemon (no GPU 7 on this machine): the reasons, and no
    'an identical job is already queued (--dedup)'."""
    f = tmp_path / "jobs.txt"
    f.write_text("0,true,,,7\n1,true,,,7\n")
    r = rota("submit", "-f", str(f), "--dedup")
    assert r.exit_code == 2
    assert "identical" not in r.output
    assert f"{f}:1: " in r.stderr and f"{f}:2: " in r.stderr
