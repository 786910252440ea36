"""The remote training step as its job runs it (``python -m rota.pipeline.gradients_step``)
against a local fake of the Gradients API (tests/pipeline/fake_gradients.py): the bodies
the notes describe, to each endpoint; 5xx answers tried again, a 4xx never; a task that
fails; an auditing answer whose best entry has no repo; a run killed after its create
follows the same task when started again (one create in all); a lost create answer never
makes a second task; the key in no output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from fake_gradients import KEY, FakeGradients, Script, entry

from rota.errors import RemoteServiceError
from rota.pipeline.gradients_api import GradientsApi, GradientsError, HotkeyDetail, scrub, winner
from rota_testing import wait_until

URL = "https://bucket.s3.example/chunk.json?X-Amz-Signature=abc"


def folder(tmp: Path, urls: dict[str, str] | None = None) -> Path:
    f = tmp / "round-1"
    f.mkdir(parents=True, exist_ok=True)
    (f / "prep.json").write_text(json.dumps({"urls": urls or {"dataset": URL}}))
    return f


def args(fake: FakeGradients, f: Path, task_type: str = "InstructText",
         *more: str) -> list[str]:
    return [sys.executable, "-m", "rota.pipeline.gradients_step", "--round-dir", str(f),
            "--api-url", fake.url, "--task-type", task_type, "--model-repo",
            "Qwen/Qwen2.5-0.5B", "--hours-to-complete", "3", "--poll-interval", "0.05",
            "--retry-scale", "0.001", *more]


def run(fake: FakeGradients, f: Path, task_type: str = "InstructText",
        key: str = KEY, *more: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(args(fake, f, task_type, *more),
                       env={**os.environ, "GRADIENTS_API_KEY": key},
                       capture_output=True, text=True, timeout=120, check=False)
    assert_no_secret(f, r.stdout + r.stderr, key)
    return r


def assert_no_secret(f: Path, output: str, key: str = KEY) -> None:
    """The key and the presigned URLs are in no output and in no file the step wrote."""
    written = [p.read_text() for p in f.parent.rglob("*") if p.is_file() and
               p.name != "prep.json"]
    for text in (output, *written):
        assert key not in text and "X-Amz-Signature" not in text


def result(f: Path) -> dict[str, Any]:
    return dict(json.loads((f / "train.json").read_text()))


def test_a_round_is_created_followed_and_its_best_entry_with_a_repo_wins(
        tmp_path: Path) -> None:
    script = Script(statuses=["pending", "preparing_data", "training", "training",
                              "evaluating", "success"],
                    auditing=[entry("h1", 0.80, None, rank=1),  # the lowest: no repo
                              entry("h2", 0.85, "miner2/lora", rank=2, synth=None),
                              entry("h3", 0.0, "miner3/lora", rank=3),  # a 0 loss is no loss
                              entry("h4", 0.70, "miner4/lora", rank=4, quality=None),
                              entry("h5", 0.90, "miner5/lora", rank=5)])
    with FakeGradients(script) as fake:
        r = run(fake, f := folder(tmp_path))
    assert r.returncode == 0, r.stderr
    [(task, body)] = script.creates
    assert body == {"model_repo": "Qwen/Qwen2.5-0.5B", "ds_repo": URL,
                    "field_instruction": "instruction", "field_input": "input",
                    "field_output": "output", "field_system": None, "format": None,
                    "no_input_format": None, "hours_to_complete": 3, "file_format": "s3"}
    got = result(f)
    assert (got["task_id"], got["adapter"], got["winner"]["hotkey"]) == (task, "miner2/lora",
                                                                        "h2")
    assert got["winner"]["synth_loss"] is None  # no crash on a missing synth loss
    assert (got["status"], got["entries"], got["base_model_repository"]) == (
        "success", 5, "Qwen/Qwen2.5-0.5B")
    # each status said once, however often it was read
    said = [x for x in r.stdout.splitlines() if x.startswith(f"task {task}: ")][:-1]
    assert said == [f"task {task}: {s}" for s in ("pending", "preparing_data", "training",
                                                   "evaluating", "success")]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"test_loss": 0.85,
                                                             "quality_score": 0.9}
    assert set(script.auth) == {f"Bearer {KEY}"}


def test_5xx_answers_are_tried_again_and_a_4xx_is_not(tmp_path: Path) -> None:
    script = Script(create_errors=[503, 502], get_errors=[500, 503, 504],
                    auditing=[entry("h", 0.5, "m/l")])
    with FakeGradients(script) as fake:
        r = run(fake, folder(tmp_path))
    assert r.returncode == 0, r.stderr
    creates = [c for m, p, c in script.requests if m == "POST"]
    assert creates == [503, 502, 200] and len(script.creates) == 1
    assert [c for m, p, c in script.requests if p.startswith("/v1/tasks/") and m == "GET"
            ][:4] == [500, 503, 504, 200]
    with FakeGradients(Script(create_refusal=422)) as fake:
        r = run(fake, f := folder(tmp_path / "refused"))
        assert [m for m, _, _ in fake.script.requests] == ["POST"]  # once, not again
    assert r.returncode == 2
    assert "POST /v1/tasks/create: 422 Unprocessable Entity: model_repo not allowed" in \
        r.stderr
    assert not (f / "gradients-task.json").exists()  # refused: nothing made, may try again
    with FakeGradients() as fake:
        r = run(fake, folder(tmp_path / "bad-key"), key="not-the-key")
    assert r.returncode == 2 and "401 Unauthorized: Invalid API key" in r.stderr


def test_a_task_that_fails_ends_the_step_and_says_so(tmp_path: Path) -> None:
    script = Script(statuses=["pending", "looking_for_nodes", "failure_finding_nodes"])
    with FakeGradients(script) as fake:
        r = run(fake, f := folder(tmp_path))
    assert r.returncode == 3
    task = script.creates[0][0]
    assert r.stderr.strip() == f"gradients: Gradients task {task} ended failure_finding_nodes"
    assert result(f) == {"task_id": task, "status": "failure_finding_nodes", "failed": True}


def test_no_entry_with_a_repo_is_nothing_to_merge(tmp_path: Path) -> None:
    script = Script(auditing=[entry("h1", 0.4, None), entry("h2", None, "m/l"),
                              entry("h3", 0.2, "m/l3", quality=None)])
    with FakeGradients(script) as fake:
        r = run(fake, f := folder(tmp_path))
    assert r.returncode == 4 and "no entry of 3 has a repo" in r.stderr
    assert result(f)["failed"] is True


def test_a_killed_run_follows_its_task_when_started_again_one_create_in_all(
        tmp_path: Path) -> None:
    script = Script(statuses=["training"] * 10_000, auditing=[entry("h", 0.3, "m/l")])
    with FakeGradients(script) as fake:
        f = folder(tmp_path)
        p = subprocess.Popen(args(fake, f), env={**os.environ, "GRADIENTS_API_KEY": KEY},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_until(lambda: sum(script.reads.values()) >= 3, timeout=60, what="polling")
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        assert json.loads((f / "gradients-task.json").read_text())["state"] == "created"
        script.statuses = ["training", "success"]
        script.reads.clear()
        r = run(fake, f)
    assert r.returncode == 0, r.stderr
    assert len(script.creates) == 1 and "following Gradients task" in r.stdout
    assert result(f)["task_id"] == script.creates[0][0]


def test_a_lost_create_answer_never_makes_a_second_task(tmp_path: Path) -> None:
    f = folder(tmp_path)
    (f / "gradients-task.json").write_text(json.dumps({"state": "creating", "since": 1.0}))
    with FakeGradients() as fake:
        r = run(fake, f)
        assert fake.script.requests == []
    assert r.returncode == 5
    assert "its answer was lost: a task may exist (and be paid for)" in r.stderr


def test_chat_and_fixed_datasets_go_to_their_endpoints(tmp_path: Path) -> None:
    urls = {"train": URL + "1", "test": URL + "2", "synth": URL + "3"}
    with FakeGradients(Script(auditing=[entry("h", 0.3, "m/l")])) as fake:
        assert run(fake, folder(tmp_path / "chat"), "Chat").returncode == 0
        r = run(fake, folder(tmp_path / "fixed", urls), "InstructTextWithFixedDatasets")
        assert r.returncode == 0, r.stderr
        (_, chat), (_, fixed) = fake.script.creates
        paths = [p for m, p, _ in fake.script.requests if m == "POST"]
    assert paths == ["/v1/tasks/create_chat", "/v1/tasks/create_with_fixed_datasets"]
    assert (chat["chat_column"], chat["chat_template"], chat["ds_repo"]) == (
        "conversations", "chatml", URL)
    assert (fixed["ds_repo"], fixed["training_data"], fixed["test_data"],
            fixed["synthetic_data"]) == (None, URL + "1", URL + "2", URL + "3")


def test_the_winner_is_the_lowest_test_loss_among_entries_with_a_repo() -> None:
    def d(**kw: Any) -> HotkeyDetail:
        return HotkeyDetail.model_validate({"quality_score": 1.0, **kw})

    assert winner([]) is None
    assert winner([d(test_loss=0.1, repo=None), d(test_loss=0.0, repo="a"),
                   d(test_loss=None, repo="b")]) is None
    tie = [d(hotkey="z", test_loss=0.5, repo="z", rank=2),
           d(hotkey="a", test_loss=0.5, repo="a", rank=2),
           d(hotkey="m", test_loss=0.5, repo="m", rank=1)]
    assert winner(tie).hotkey == "m"  # type: ignore[union-attr]
    assert winner(tie[:2]).hotkey == "a"  # type: ignore[union-attr]
    assert winner([d(test_loss=0.3, repo="x", quality_score=None),
                   d(test_loss=0.4, repo="y")]).repo == "y"  # type: ignore[union-attr]


def test_a_missing_key_is_said_at_once(tmp_path: Path) -> None:
    with FakeGradients() as fake:
        r = subprocess.run(args(fake, folder(tmp_path)),
                           env={k: v for k, v in os.environ.items()
                                if k != "GRADIENTS_API_KEY"},
                           capture_output=True, text=True, timeout=60, check=False)
        assert fake.script.requests == []
    assert r.returncode == 2 and "rota secret set GRADIENTS_API_KEY" in r.stderr


def test_an_unknown_status_is_waited_through_and_said_once(tmp_path: Path) -> None:
    script = Script(statuses=["pending", "queued_upstream", "training", "queued_upstream",
                              "queued_upstream", "success"], auditing=[entry("h", 0.3, "m/l")])
    with FakeGradients(script) as fake:
        r = run(fake, folder(tmp_path))
    assert r.returncode == 0, r.stderr
    said = [x for x in r.stdout.splitlines() if "queued_upstream" in x]
    assert len(said) == 1 and "a status this Rota does not know: still waiting" in said[0]
    assert script.reads[script.creates[0][0]] == 6


def test_429_is_tried_again_and_a_create_refused_to_the_end_leaves_no_record(
        tmp_path: Path) -> None:
    script = Script(create_errors=[429], get_errors=[429], auditing=[entry("h", 0.3, "m/l")])
    with FakeGradients(script) as fake:
        assert run(fake, folder(tmp_path)).returncode == 0
    assert [c for m, _, c in script.requests if m == "POST"] == [429, 200]
    script = Script(create_errors=[500, 500, 500, 500])
    with FakeGradients(script) as fake:
        r = run(fake, f := folder(tmp_path / "down"))
    # three tries, as the POST waits allow; the app answered each: nothing was made
    assert r.returncode == 1 and [c for m, _, c in script.requests] == [500, 500, 500]
    assert "POST /v1/tasks/create: 500 Internal Server Error: try later" in r.stderr
    assert not (f / "gradients-task.json").exists() and script.creates == []


def test_a_create_whose_answer_is_lost_is_never_sent_again(tmp_path: Path) -> None:
    script = Script(create_delay=5.0)  # made at once, answered after the client gave up
    with FakeGradients(script) as fake:
        r = run(fake, f := folder(tmp_path), "InstructText", KEY, "--http-timeout", "0.5")
        assert r.returncode == 5, r.stderr
        assert "sent, and no answer came (ReadTimeout)" in r.stderr
        assert "a task may exist (and be paid for)" in r.stderr
        assert json.loads((f / "gradients-task.json").read_text())["state"] == "creating"
        again = run(fake, f, "InstructText", KEY, "--http-timeout", "0.5")
        assert again.returncode == 5 and "its answer was lost" in again.stderr
        assert len(script.auth) == 1  # one request in all: the create, sent once
    assert len(script.creates) == 1


def test_a_504_on_create_may_have_made_a_task_and_is_not_tried_again(tmp_path: Path) -> None:
    script = Script(create_errors=[504])
    with FakeGradients(script) as fake:
        r = run(fake, f := folder(tmp_path))
    assert r.returncode == 5 and "504 Gateway Timeout" in r.stderr
    assert [c for m, _, c in script.requests] == [504]
    assert json.loads((f / "gradients-task.json").read_text())["state"] == "creating"


def test_an_unreadable_record_is_not_taken_for_none(tmp_path: Path) -> None:
    f = folder(tmp_path)
    (f / "gradients-task.json").write_text("{trunc")
    with FakeGradients() as fake:
        r = run(fake, f)
        assert fake.script.requests == []
    assert r.returncode == 5 and "not a record this step wrote" in r.stderr


def test_server_messages_echoing_the_key_or_a_presigned_url_are_scrubbed(
        tmp_path: Path) -> None:
    with FakeGradients(Script(create_refusal=422, refusal_echoes_body=True)) as fake:
        r = run(fake, folder(tmp_path / "echo"))
    assert r.returncode == 2 and "https://bucket.s3.example/chunk.json?<hidden>" in r.stderr
    wrong = "gr-another-secret-9876"
    with FakeGradients(Script(echo_auth=True)) as fake:
        r = run(fake, folder(tmp_path / "auth"), key=wrong)  # run() checks neither leaks
    assert r.returncode == 2 and "Invalid API key: Bearer <key>" in r.stderr
    for bad in ("two words", "line\nbreak", "caf\u00e9"):
        with FakeGradients() as fake:
            r = run(fake, folder(tmp_path / "bad"), key=bad)
            assert fake.script.requests == []
        assert r.returncode == 2 and "characters an HTTP header cannot carry" in r.stderr


def test_the_client_keeps_its_key_out_of_reprs_and_errors() -> None:
    api = GradientsApi("http://127.0.0.1:9", KEY, get_waits=(), post_waits=())
    assert KEY not in repr(api) and KEY not in str(vars(api).get("__repr__", ""))
    try:
        api.task("t1")  # nothing listens on port 9
    except GradientsError as e:
        assert isinstance(e, RemoteServiceError) and e.transient and e.status == 0
        assert KEY not in str(e) and KEY not in repr(e)
    else:
        raise AssertionError("no error")
    finally:
        api.close()
    ftp = GradientsApi("ftp://127.0.0.1:9", KEY, get_waits=(), post_waits=())
    try:  # never sent: a plain refusal, not "a task may exist"
        ftp.create("InstructText", {})
    except GradientsError as e:
        assert type(e) is GradientsError and not e.transient and "cannot send" in str(e)
    else:
        raise AssertionError("no error")
    finally:
        ftp.close()
    assert scrub("see https://b.s3/x.json?X-Amz-Signature=s3cr3t&a=1 now") == \
        "see https://b.s3/x.json?<hidden> now"


def test_rotas_stop_ends_the_step_promptly_and_the_next_run_follows_the_task(
        tmp_path: Path) -> None:
    script = Script(statuses=["training"] * 10_000, auditing=[entry("h", 0.3, "m/l")])
    env = {**os.environ, "GRADIENTS_API_KEY": KEY}
    with FakeGradients(script) as fake:
        f = folder(tmp_path)
        # a poll every 10 minutes: the stop must not wait for the next one
        p = subprocess.Popen(args(fake, f, "InstructText", "--poll-interval", "600"), env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_until(lambda: sum(script.reads.values()) >= 1, timeout=60, what="polling")
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=20)
        assert p.returncode == 143, err
        assert "stopped while task" in out and "a new run of this job follows it" in out
        # stopped inside a retry wait (the first GET wait is 60 s at this scale)
        script.get_errors = [500] * 5
        p = subprocess.Popen(args(fake, f, "InstructText", "--retry-scale", "1"), env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_until(lambda: (("GET", f"/v1/tasks/{script.creates[0][0]}", 500)
                            in script.requests), timeout=60, what="a 500")
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=20)
        assert p.returncode == 143, err
        assert_no_secret(f, out + err)
        script.get_errors, script.statuses = [], ["success"]
        r = run(fake, f)
    assert r.returncode == 0, r.stderr
    assert len(script.creates) == 1 and "following Gradients task" in r.stdout


def test_a_create_answered_200_without_a_task_id_is_a_task_that_may_exist(
        tmp_path: Path) -> None:
    script = Script(create_answer={"success": True, "note": "queued"})
    with FakeGradients(script) as fake:
        r = run(fake, f := folder(tmp_path))
    assert r.returncode == 5 and "200 without a task id in the answer" in r.stderr
    assert json.loads((f / "gradients-task.json").read_text())["state"] == "creating"
    assert len(script.creates) == 1


def test_an_odd_auditing_entry_is_left_out_not_fatal(tmp_path: Path) -> None:
    odd = {**entry("h1", 0.1, "m/odd"), "test_loss": "n/a"}
    script = Script(auditing=[odd, entry("h2", 0.4, "m/good", rank=2), "not an entry"])
    with FakeGradients(script) as fake:
        r = run(fake, f := folder(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "entry 0 is not a hotkey detail (left out)" in r.stdout
    assert "entry 2 is not a hotkey detail (left out)" in r.stdout
    assert (result(f)["adapter"], result(f)["entries"]) == ("m/good", 1)


def test_bad_input_is_named_before_any_request(tmp_path: Path) -> None:
    with FakeGradients() as fake:
        f = folder(tmp_path)
        (f / "prep.json").unlink()
        r = run(fake, f)
        assert r.returncode == 2 and f"{f / 'prep.json'}: no such file" in r.stderr
        fixed = folder(tmp_path / "fixed", {"train": URL})
        r = run(fake, fixed, "InstructTextWithFixedDatasets")
        assert r.returncode == 2 and "prep.json has no URL for test, synth" in r.stderr
        bad_url = [*args(fake, f)]
        bad_url[bad_url.index(fake.url)] = "api.gradients.io"
        r = subprocess.run(bad_url, env={**os.environ, "GRADIENTS_API_KEY": KEY},
                           capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 2
        assert "--api-url 'api.gradients.io': not an http(s) URL with a host" in r.stderr
        assert fake.script.requests == [] and fake.script.auth == []
    assert not (f / "gradients-task.json").exists()
