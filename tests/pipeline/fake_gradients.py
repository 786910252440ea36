"""A local fake of the Gradients training API, written from the notes' description
(../shared/notes/original-systems.md, "Gradients API usage"): the three create endpoints
and their bodies, the task status, the auditing answer, the bearer key. A real HTTP server
on 127.0.0.1 in a thread, scripted per test: 5xx answers before a good one, a refused
create, the statuses a task goes through, the auditing entries."""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

KEY = "gr-secret-key-0123456789"
INSTRUCT = {"model_repo", "ds_repo", "field_instruction", "field_input", "field_output",
            "field_system", "format", "no_input_format", "hours_to_complete", "file_format"}
BODIES = {
    "/v1/tasks/create": INSTRUCT,
    "/v1/tasks/create_chat": {"model_repo", "ds_repo", "chat_template", "chat_column",
                              "chat_role_field", "chat_content_field", "chat_user_reference",
                              "chat_assistant_reference", "hours_to_complete",
                              "file_format"},
    "/v1/tasks/create_with_fixed_datasets": INSTRUCT | {"training_data", "test_data",
                                                        "synthetic_data"},
}


@dataclass
class Script:
    """What the fake answers, and what it saw."""

    statuses: list[str] = field(default_factory=lambda: ["pending", "training", "success"])
    create_errors: list[int] = field(default_factory=list)  # answered before a good create
    create_refusal: int | None = None  # answered to every create
    refusal_echoes_body: bool = False  # a 422 as FastAPI writes it: each field's input back
    create_delay: float = 0.0  # the task is made, then the answer waits this long
    echo_auth: bool = False  # a 401 that quotes the header it was sent
    create_answer: dict[str, Any] | None = None  # a made task answered with this instead
    get_errors: list[int] = field(default_factory=list)  # answered before good task reads
    auditing: list[Any] = field(default_factory=list)  # hotkey_details, odd ones too
    creates: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # made ones
    requests: list[tuple[str, str, int]] = field(default_factory=list)  # method, path, code
    auth: list[str] = field(default_factory=list)  # Authorization headers seen
    reads: dict[str, int] = field(default_factory=dict)  # task id -> status reads


class FakeGradients:
    def __init__(self, script: Script | None = None) -> None:
        self.script = script or Script()
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                fake.post(self)

            def do_GET(self) -> None:
                fake.get(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeGradients:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    # --- answers -------------------------------------------------------------------------
    def _answer(self, h: BaseHTTPRequestHandler, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.script.requests.append((h.command, h.path, code))
        try:
            h.send_response(code)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        except OSError:  # the client gave up waiting (a create whose answer is lost)
            pass

    def _authorised(self, h: BaseHTTPRequestHandler) -> bool:
        got = h.headers.get("Authorization", "")
        self.script.auth.append(got)
        if got != f"Bearer {KEY}":
            said = f"Invalid API key: {got}" if self.script.echo_auth else "Invalid API key"
            self._answer(h, 401, {"detail": said})
            return False
        return True

    def post(self, h: BaseHTTPRequestHandler) -> None:
        answer = self._post(h)
        if answer is not None:  # made: the answer may come late (the lock is not held)
            time.sleep(self.script.create_delay)
            self._answer(h, 200, answer)

    def _post(self, h: BaseHTTPRequestHandler) -> dict[str, Any] | None:
        with self.lock:
            if not self._authorised(h):
                return
            s = self.script
            body = json.loads(h.rfile.read(int(h.headers.get("Content-Length") or 0)) or b"{}")
            wanted = BODIES.get(h.path)
            if wanted is None:
                return self._answer(h, 404, {"detail": "Not Found"})
            if s.create_refusal is not None:
                detail: Any = "model_repo not allowed"
                if s.refusal_echoes_body:
                    detail = [{"type": "value_error", "loc": ["body", k], "msg": "invalid",
                               "input": v} for k, v in body.items()]
                return self._answer(h, s.create_refusal, {"detail": detail})
            if s.create_errors:
                return self._answer(h, s.create_errors.pop(0), {"detail": "try later"})
            if set(body) != wanted or body.get("file_format") != "s3":
                return self._answer(h, 422, {"detail": f"bad body: {sorted(set(body) ^ wanted)}"})
            task = str(uuid.uuid4())
            s.creates.append((task, body))
            if s.create_answer is not None:
                return s.create_answer
            return {"success": True, "task_id": task, "created_at": "2026-11-28T12:00:00",
                    "account_id": "acct"}

    def get(self, h: BaseHTTPRequestHandler) -> None:
        with self.lock:
            if not self._authorised(h):
                return
            s = self.script
            known = {t for t, _ in s.creates}
            if h.path.startswith("/v1/tasks/"):
                task = h.path.removeprefix("/v1/tasks/")
                if task not in known:
                    return self._answer(h, 404, {"detail": "Task not found"})
                if s.get_errors:
                    return self._answer(h, s.get_errors.pop(0), {"detail": "busy"})
                n = s.reads.get(task, 0)
                s.reads[task] = n + 1
                status = s.statuses[min(n, len(s.statuses) - 1)]
                body = dict(next(b for t, b in s.creates if t == task))
                return self._answer(h, 200, {
                    "id": task, "account_id": "acct", "status": status,
                    "base_model_repository": body["model_repo"],
                    "trained_model_repository": None, "created_at": "2026-11-28T12:00:00",
                    "hours_to_complete": body["hours_to_complete"]})
            if h.path.startswith("/auditing/tasks/"):
                task = h.path.removeprefix("/auditing/tasks/")
                if task not in known:
                    return self._answer(h, 404, {"detail": "Task not found"})
                return self._answer(h, 200, {"hotkey_details": s.auditing})
            self._answer(h, 404, {"detail": "Not Found"})


def entry(hotkey: str, test_loss: float | None, repo: str | None, *, rank: int = 1,
          quality: float | None = 0.9, synth: float | None = None) -> dict[str, Any]:
    """One auditing hotkey_details entry, as the API answers it."""
    return {"hotkey": hotkey, "submission_id": f"sub-{hotkey}", "quality_score": quality,
            "test_loss": test_loss, "synth_loss": synth, "repo": repo, "rank": rank,
            "score_reason": None, "offer_response": None}
