"""A round's remote training: ``python -m rota.pipeline.gradients_step --round-dir DIR
--task-type T --model-repo REPO ...``; the key is ``GRADIENTS_API_KEY`` (a stored secret).

Never twice: before the create request, ``DIR/gradients-task.json`` says ``creating``;
after it, the task's id. A run that finds an id follows that task (a restarted job, after
the daemon or the node went away); a run that finds ``creating`` without an id (the create
was sent and its answer lost) creates nothing and says so (exit 5): a paid task may exist.
A create that is refused (a 4xx; 429 or 5xx after its tries) made nothing: the record is
removed. One whose answer never came (or came as 504) leaves ``creating``: exit 5 too.

The task is read every ``--poll-interval`` until it ends (each change of status said once).
On success the auditing results are read and the winner taken (rota.pipeline.gradients_api
.winner: entries without a repo are dropped first); ``DIR/train.json`` says what was
trained (``adapter``: the winner's repo). Exit 0; 3 the task failed; 4 it succeeded with no
entry to merge; 2 bad input or a refusal; 1 the API could not be reached; 5 see above;
143 Rota's stop signal came first (the remote task goes on; the record lets the next run
follow it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rota.pipeline import gradients_api as api
from rota.pipeline.results import write_private

RECORD = "gradients-task.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Train a round through the Gradients API.")
    p.add_argument("--round-dir", required=True)
    p.add_argument("--api-url", default=os.environ.get("GRADIENTS_API_URL",
                                                       "https://api.gradients.io"))
    p.add_argument("--task-type", required=True, choices=tuple(api.CREATE_PATHS))
    p.add_argument("--model-repo", required=True)
    p.add_argument("--hours-to-complete", type=int, default=8)
    p.add_argument("--chat-template", default="chatml")
    p.add_argument("--poll-interval", type=float, default=600.0)
    p.add_argument("--prep", default=None, help="default: ROUND_DIR/prep.json")
    p.add_argument("--retry-scale", type=float, default=1.0,
                   help="multiplies the retry waits (tests make them short)")
    p.add_argument("--http-timeout", type=float, default=60.0,
                   help="seconds one request may take")
    args = p.parse_args(argv)
    if urlsplit(args.api_url).scheme not in ("http", "https") or \
            not urlsplit(args.api_url).hostname:
        p.error(f"--api-url {args.api_url!r}: not an http(s) URL with a host")
    if not Path(args.round_dir).is_dir():
        p.error(f"--round-dir {args.round_dir}: no such folder")
    if args.hours_to_complete < 1 or args.poll_interval <= 0 or args.retry_scale < 0:
        p.error("--hours-to-complete must be at least 1, --poll-interval above 0 and "
                "--retry-scale not negative")
    return args


class _Stopped(Exception):
    """Rota asked this job to stop (its stop signal) while it waited."""


def _sleep(seconds: float) -> None:
    """A wait that ends early, raising _Stopped, when Rota asks the job to stop."""
    from rota import job

    deadline = time.monotonic() + seconds
    while True:
        if job.should_stop():
            raise _Stopped
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(0.5, left))


def main(argv: list[str] | None = None) -> int:
    from rota import job

    args = parse_args(argv)
    key = os.environ.get("GRADIENTS_API_KEY", "").strip()
    if not key:
        return _fail(2, "GRADIENTS_API_KEY is not set: store it (rota secret set "
                        "GRADIENTS_API_KEY); the pipeline gives it to this job")
    folder = Path(args.round_dir)
    job.should_stop()  # the stop handler: a stop while polling ends the job promptly
    try:
        client = api.GradientsApi(
            args.api_url, key, timeout=args.http_timeout, sleep=_sleep,
            post_waits=[w * args.retry_scale for w in api.POST_WAITS_S],
            get_waits=[w * args.retry_scale for w in api.GET_WAITS_S])
    except api.GradientsError as e:
        return _fail(2, f"GRADIENTS_API_KEY: {e}")
    task_id = None
    try:
        task_id = _the_task(client, args, folder)
        if task_id is None:
            return 5
        status, task = _follow(client, task_id, args.poll_interval)
        if status != api.SUCCESS:
            _write(folder, {"task_id": task_id, "status": status, "failed": True})
            return _fail(3, f"Gradients task {task_id} ended {status}")
        details = client.auditing(task_id)
        best = api.winner(details)
        if best is None:
            _write(folder, {"task_id": task_id, "status": status, "failed": True,
                            "entries": len(details)})
            return _fail(4, f"Gradients task {task_id} succeeded but no entry of "
                            f"{len(details)} has a repo with a quality score and a test "
                            "loss: nothing to merge")
    except _Stopped:
        if task_id is None:
            print("stopped before a task was created", flush=True)
        else:
            print(f"stopped while task {task_id} runs; a new run of this job follows it",
                  flush=True)
        return 143
    except api.CreateUncertain as e:
        return _fail(5, f"{e}: {_UNCERTAIN.format(record=folder / RECORD)}")
    except api.GradientsError as e:
        return _fail(1 if e.transient else 2, str(e))
    finally:
        client.close()
    win = best.model_dump(include={"hotkey", "repo", "test_loss", "synth_loss",
                                   "quality_score", "rank"})
    _write(folder, {"task_id": task_id, "status": status, "adapter": best.repo,
                    "winner": win, "entries": len(details),
                    "base_model_repository": task.get("base_model_repository")})
    print(f"task {task_id}: the winner is {best.hotkey} ({best.repo}, test loss "
          f"{best.test_loss}) of {len(details)} entries", flush=True)
    print(json.dumps({k: win[k] for k in ("test_loss", "synth_loss", "quality_score")
                      if win.get(k) is not None}), flush=True)
    return 0


_UNCERTAIN = ("a task may exist (and be paid for). Check your Gradients account; to create "
              "a new one, delete {record} and run the round again")


def _the_task(client: api.GradientsApi, args: argparse.Namespace,
              folder: Path) -> str | None:
    """The round's task: the recorded one, or one created now (None: refused to create,
    said why)."""
    record = folder / RECORD
    found = _read_record(record)
    if found.get("state") == "created" and found.get("task_id"):
        print(f"following Gradients task {found['task_id']} (created "
              f"{found.get('created_at') or 'before'})", flush=True)
        return str(found["task_id"])
    if found:
        why = ("a create request for this round was sent at "
               f"{found.get('since')} and its answer was lost"
               if found.get("state") == "creating" else f"{record} is not a record this "
               "step wrote (no task id in it)")
        _fail(5, f"{why}: {_UNCERTAIN.format(record=record)}")
        return None
    prep_file = Path(args.prep) if args.prep else folder / "prep.json"
    if not prep_file.is_file():
        raise api.GradientsError(f"{prep_file}: no such file (the data step writes it)")
    urls = _read(prep_file).get("urls")
    urls = urls if isinstance(urls, dict) else {}
    body = _body(args, urls)
    write_private(record, {"state": "creating", "since": time.time()})
    try:
        made = client.create(args.task_type, body)
    except api.CreateUncertain:
        raise  # the record stays: never a second task
    except (api.GradientsError, _Stopped):
        record.unlink(missing_ok=True)  # refused, or stopped in a wait: nothing was made
        raise
    write_private(record, {"state": "created", "task_id": made.task_id,
                            "created_at": made.created_at})
    print(f"created Gradients task {made.task_id} ({args.task_type}, {args.model_repo}, "
          f"{args.hours_to_complete} h)", flush=True)
    return made.task_id


def _read_record(path: Path) -> dict[str, Any]:
    """The write-ahead record ({} when there is none). One that exists but cannot be read
    is not taken for none: a task may stand behind it."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as e:
        return {"state": "unreadable", "error": type(e).__name__}
    try:
        data = json.loads(text)
    except ValueError:
        return {"state": "unreadable"}
    return data if isinstance(data, dict) and data else {"state": "unreadable"}


def _body(args: argparse.Namespace, urls: dict[str, str]) -> dict[str, Any]:
    if args.task_type == "InstructTextWithFixedDatasets":
        missing = [k for k in ("train", "test", "synth") if not urls.get(k)]
        if missing:
            raise api.GradientsError(f"prep.json has no URL for {', '.join(missing)}: the "
                                     "pipeline needs an upload section")
        return api.fixed_body(args.model_repo, urls, args.hours_to_complete)
    if not urls.get("dataset"):
        raise api.GradientsError("prep.json has no dataset URL: the pipeline needs an "
                                 "upload section")
    if args.task_type == "Chat":
        return api.chat_body(args.model_repo, urls["dataset"], args.hours_to_complete,
                             args.chat_template)
    return api.instruct_body(args.model_repo, urls["dataset"], args.hours_to_complete)


def _follow(client: api.GradientsApi, task_id: str,
            every: float) -> tuple[str, dict[str, Any]]:
    """The task's end status and last answer (_Stopped: Rota asked this job to stop)."""
    last, unknown = None, set()
    while True:
        task = client.task(task_id)
        status = str(task["status"])
        known = status in api.RUNNING or status == api.SUCCESS or status in api.FAILED
        if status != last and (known or status not in unknown):
            print(f"task {task_id}: {status}" + ("" if known else " (a status this Rota "
                                                 "does not know: still waiting)"), flush=True)
        if not known:
            unknown.add(status)
        last = status
        if status == api.SUCCESS or status in api.FAILED:
            return status, task
        _sleep(every)


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(folder: Path, value: dict[str, Any]) -> None:
    write_private(folder / "train.json", value)


def _fail(code: int, message: str) -> int:
    print(f"gradients: {message}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
