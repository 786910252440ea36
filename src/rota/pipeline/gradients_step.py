"""A round's remote training: ``python -m rota.pipeline.gradients_step --round-dir DIR
--task-type T --model-repo REPO ...``; the key is ``GRADIENTS_API_KEY`` (a stored secret).

Never twice: before the create request, ``DIR/gradients-task.json`` says ``creating``;
after it, the task's id. A run that finds an id follows that task (a restarted job, after
the daemon or the node went away); a run that finds ``creating`` without an id (the create
was sent and its answer lost) creates nothing and says so (exit 5): a paid task may exist.
A refused create (4xx, or 5xx after its tries) made nothing: the record is removed.

The task is read every ``--poll-interval`` until it ends (each change of status said once).
On success the auditing results are read and the winner taken (rota.pipeline.gradients_api
.winner: entries without a repo are dropped first); ``DIR/train.json`` says what was
trained (``adapter``: the winner's repo). Exit 0; 3 the task failed; 4 it succeeded with no
entry to merge; 2 bad input or a refusal; 1 the API could not be reached; 5 see above.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

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
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from rota import job

    args = parse_args(argv)
    key = os.environ.get("GRADIENTS_API_KEY")
    if not key:
        return _fail(2, "GRADIENTS_API_KEY is not set: store it (rota secret set "
                        "GRADIENTS_API_KEY); the pipeline gives it to this job")
    folder = Path(args.round_dir)
    client = api.GradientsApi(
        args.api_url, key, post_waits=[w * args.retry_scale for w in api.POST_WAITS_S],
        get_waits=[w * args.retry_scale for w in api.GET_WAITS_S])
    job.should_stop()  # the stop handler: a stop while polling ends the job promptly
    try:
        task_id = _the_task(client, args, folder)
        if task_id is None:
            return 5
        status = _follow(client, task_id, args.poll_interval)
        if status is None:
            print(f"stopped while task {task_id} runs; a new run of this job follows it",
                  flush=True)
            return 143
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
    except api.GradientsError as e:
        return _fail(1 if e.passing else 2, str(e))
    finally:
        client.close()
    win = best.model_dump(include={"hotkey", "repo", "test_loss", "synth_loss",
                                   "quality_score", "rank"})
    _write(folder, {"task_id": task_id, "status": status, "adapter": best.repo,
                    "winner": win, "entries": len(details)})
    print(f"task {task_id}: the winner is {best.hotkey} ({best.repo}, test loss "
          f"{best.test_loss}) of {len(details)} entries", flush=True)
    print(json.dumps({k: win[k] for k in ("test_loss", "synth_loss", "quality_score")
                      if win.get(k) is not None}), flush=True)
    return 0


def _the_task(client: api.GradientsApi, args: argparse.Namespace,
              folder: Path) -> str | None:
    """The round's task: the recorded one, or one created now (None: refused to create,
    said why)."""
    record = folder / RECORD
    found = _read(record)
    if found.get("state") == "created":
        print(f"following Gradients task {found['task_id']} (created "
              f"{found.get('created_at') or 'before'})", flush=True)
        return str(found["task_id"])
    if found.get("state") == "creating":
        _fail(5, f"a create request for this round was sent at {found.get('since')} and "
                 "its answer was lost: a task may exist (and be paid for). Check your "
                 f"Gradients account; to create a new one, delete {record} and run the "
                 "round again")
        return None
    prep = _read(Path(args.prep) if args.prep else folder / "prep.json")
    urls = prep.get("urls") or {}
    body = _body(args, urls)
    write_private(record, {"state": "creating", "since": time.time()})
    try:
        made = client.create(args.task_type, body)
    except api.CreateUncertain:
        raise  # the record stays: never a second task
    except api.GradientsError:
        record.unlink(missing_ok=True)  # refused: nothing was made
        raise
    write_private(record, {"state": "created", "task_id": made.task_id,
                            "created_at": made.created_at})
    print(f"created Gradients task {made.task_id} ({args.task_type}, {args.model_repo}, "
          f"{args.hours_to_complete} h)", flush=True)
    return made.task_id


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


def _follow(client: api.GradientsApi, task_id: str, every: float) -> str | None:
    """The task's end status (None: Rota asked this job to stop first)."""
    from rota import job

    last = None
    while True:
        status = str(client.task(task_id)["status"])
        if status != last:
            known = status in api.RUNNING or status == api.SUCCESS or status in api.FAILED
            print(f"task {task_id}: {status}" + ("" if known else " (a status this Rota "
                                                 "does not know: still waiting)"), flush=True)
            last = status
        if status == api.SUCCESS or status in api.FAILED:
            return status
        deadline = time.monotonic() + every
        while time.monotonic() < deadline:
            if job.should_stop():
                return None
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


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
