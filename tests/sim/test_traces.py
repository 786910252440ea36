"""Trace loaders on excerpts of the real files (tests/sim/data) and Rota's own formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rota.errors import InvalidSpec
from rota.sim.cluster import load_cluster, parse_cluster
from rota.sim.trace import SimJob
from rota.sim.traces import as_rota_json, from_history, load

DATA = Path(__file__).parent / "data"


def test_tiresias_excerpt() -> None:
    jobs = load(DATA / "tiresias_60job_head.csv")
    assert len(jobs) == 24
    assert jobs[0].id == 0 and jobs[0].submit == 0 and jobs[0].gpus_milli == 1000
    assert jobs[1].gpus_milli == 8000 and jobs[1].submit == 30 and jobs[1].duration == 147
    assert jobs[0].user == "vgg19"
    cluster = load_cluster(DATA / "n32g4.csv")
    assert (len(cluster.nodes), cluster.largest_node, cluster.gpus) == (32, 4, 128)


def test_openb_excerpt() -> None:
    jobs = load(DATA / "openb_pods_excerpt.csv")
    names = {j.name for j in jobs}
    assert "openb-pod-0001" in names
    pod1 = next(j for j in jobs if j.name == "openb-pod-0001")
    assert pod1.gpus_milli == 460  # a share of one GPU
    assert pod1.duration == 12902960 - 427061
    assert pod1.submit == 427061  # the first pod arrives at 0
    assert any(j.gpus_milli in (2000, 4000, 8000) for j in jobs)
    # CPU-only pods and pods that never ran are left out
    assert all(j.gpus_milli > 0 for j in jobs)
    text = (DATA / "openb_pods_excerpt.csv").read_text()
    assert ",Pending," in text and len(jobs) < len(text.splitlines()) - 1
    nodes = load_cluster(DATA / "openb_nodes_excerpt.csv")
    assert nodes.gpus == sum(int(line.split(",")[3]) for line in
                             (DATA / "openb_nodes_excerpt.csv").read_text().splitlines()[1:])


def test_rota_csv_and_json(tmp_path: Path) -> None:
    csv_file = tmp_path / "t.csv"
    csv_file.write_text("id,submit,duration,gpus,gpu_mem,priority,user,project,name,"
                        "time_limit\n7,100,1h,0.5,24G,2,ann,p1,train,30m\n"
                        "8,160,60,2,,,bob,,,\n")
    a, b = load(csv_file)
    assert (a.id, a.submit, a.duration, a.gpus_milli, a.gpu_mem) == (7, 0, 3600, 500, 24 << 30)
    assert (a.priority, a.user, a.project, a.time_limit) == (2, "ann", "p1", 1800)
    assert (b.submit, b.gpus_milli, b.gpu_mem, b.user) == (60, 2000, None, "bob")
    js = tmp_path / "t.json"
    js.write_text(json.dumps({"jobs": [{"submit": 5, "duration": 10, "gpus": 1}]}))
    (only,) = load(js)
    assert (only.submit, only.gpus_milli) == (0, 1000)


@pytest.mark.parametrize("row, words", [
    ("1,0,10,1.5", "line 2: gpus 1.5 must be a share of one GPU"),
    ("1,zero,10,1", "line 2: submit 'zero' is not a number"),
    ("1,0,,1", "line 2: duration is missing"),
])
def test_a_bad_row_is_named(tmp_path: Path, row: str, words: str) -> None:
    f = tmp_path / "bad.csv"
    f.write_text(f"id,submit,duration,gpus\n{row}\n")
    with pytest.raises(InvalidSpec, match=words):
        load(f)


def test_bad_cluster_specs() -> None:
    with pytest.raises(InvalidSpec, match="COUNTxMEMORY"):
        parse_cluster("eight")
    assert parse_cluster("2x24G,1x48G", nodes=3).gpus == 9


def test_history_answers() -> None:
    answers = [
        {"id": 1, "created_at": 1000.0, "started_at": 1010.0, "ended_at": 1070.0, "gpus": 1.0,
         "gpu_mem": None, "priority": 0, "user": "ann", "project": None, "name": "a",
         "time_limit": None},
        {"id": 2, "created_at": 500.0, "started_at": 510.0, "ended_at": 520.0, "gpus": 1.0},
        {"id": 3, "created_at": 1100.0, "started_at": None, "ended_at": 1100.0, "gpus": 0.5},
    ]
    (job,) = from_history(answers, since=900.0)  # 2 is too old, 3 never ran
    assert (job.id, job.duration, job.user) == (1, 60, "ann")


def test_cli_compares_policies(tmp_path: Path) -> None:
    from rota.cli.main import app

    f = tmp_path / "t.csv"
    f.write_text("submit,duration,gpus\n0,10,1\n1,10,2\n2,2,1\n")
    runner = CliRunner()
    got = runner.invoke(app.typer, ["sim", "--trace", str(f), "--gpus", "2x80G",
                                    "--compare", "fifo,sjf", "--json"])
    assert got.exit_code == 0, got.output
    data = json.loads(got.output)
    assert [r["policy"] for r in data["runs"]] == ["fifo", "sjf"]
    assert data["gpus"] == 2 and data["runs"][0]["finished"] == 3
    table = runner.invoke(app.typer, ["sim", "--trace", str(f), "--gpus", "2x80G"])
    assert table.exit_code == 0 and "JCT mean s" in table.output
    bad = runner.invoke(app.typer, ["sim", "--trace", str(f), "--policy", "lottery"])
    assert bad.exit_code == 2 and "policy 'lottery'" in bad.output


def test_a_trace_saved_as_rota_json_loads_back_the_same(tmp_path: Path) -> None:
    from rota.sim.trace import SimJob
    from rota.sim.traces import as_rota_json, load_json

    jobs = [SimJob(1, 0.0, 12.5, 500, gpu_mem=2 << 30, priority=3, user="ann",
                   project="p", name="train", time_limit=60.0),
            SimJob(2, 4.0, 1.0, 2000)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(as_rota_json(jobs)))
    assert load_json(path) == jobs


def test_cli_fairshare_settings_and_expected_run_times_are_checked(tmp_path: Path) -> None:
    from rota.cli.main import app

    f = tmp_path / "t.csv"
    f.write_text("submit,duration,gpus,name,time_limit\n0,100,1,a,100\n1,10,1,b,10\n")
    runner = CliRunner()
    ok = runner.invoke(app.typer, ["sim", "--trace", str(f), "--gpus", "1x80G", "--policy",
                                   "fairshare", "--half-life", "1h", "--weights",
                                   "weight_age=0", "--expected", "limit", "--json"])
    assert ok.exit_code == 0, ok.output
    run = json.loads(ok.output)["runs"][0]
    # b waited for a, whose limit said it ends at 100: estimated exactly
    assert run["estimated"] == 1 and run["estimate_error"]["mean"] == 0
    for args, says in ((["--half-life", "0"], "half_life"),
                       (["--weights", "weight_lottery=1"], "weight_lottery"),
                       (["--weights", "weight_age"], "KEY=VALUE"),
                       (["--expected", "psychic"], "psychic"),
                       (["--shares", "alice=0"], "NAME=N with N > 0"),
                       (["--shares", "alice"], "NAME=N with N > 0"),
                       (["--shares", "project:=2"], "NAME=N with N > 0")):
        bad = runner.invoke(app.typer, ["sim", "--trace", str(f), "--policy", "fairshare",
                                        *args])
        assert bad.exit_code == 2 and says in bad.output, (args, bad.output)


def test_cli_shares_decide_who_goes_first(tmp_path: Path) -> None:
    from rota.cli.main import app

    jobs = [SimJob(1, 0, 100, 1000, user="alice"), SimJob(4, 0, 100, 1000, user="bob"),
            SimJob(2, 1, 10, 2000, user="alice"), SimJob(3, 2, 10, 2000, user="bob")]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(as_rota_json(jobs)))

    def longest_wait(*extra: str) -> float:
        r = CliRunner().invoke(app.typer, ["sim", "--trace", str(path), "--gpus", "2x80G",
                                           "--policy", "fairshare", "--json", *extra])
        assert r.exit_code == 0, r.output
        return float(json.loads(r.output)["runs"][0]["queueing"]["p99"])

    # equal shares: alice's 2-GPU job (the older) goes first at 100, bob's waits 108 s;
    # with ten shares bob's goes first and alice's waits 109 s
    assert longest_wait() == 108
    assert longest_wait("--shares", "bob=10") == 109
    assert longest_wait("--shares", "project:x=1,bob=10") == 109
