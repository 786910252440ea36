"""A client of the Gradients training API (as the Gradients Scheduler used it; see
docs/pipelines-gradients.md): create a task, follow its status, read its auditing results.

It runs inside a round's training job, never in the daemon, so it is synchronous (httpx).
Every request sends ``Authorization: Bearer KEY``; the key is kept in the client's headers
only and never appears in a message, an exception or a repr, nor does a presigned URL that
a server's message may echo back (hidden by :func:`scrub`).

Retries: what can pass is tried again with exponential waits: a lost connection, a
timeout, 5xx and 429. A 4xx is never tried again: the error names the status and the
server's words. A create costs money, so it is tried again only when the server surely
made nothing: a connection never made (refused, connect or pool timeout), or an answer of
429 or a 5xx other than 504 (the application itself answered that it failed). A create
whose answer never came (a read timeout, a broken connection) or came as 504 (a gateway
that gave up waiting on a server that may still be making the task) may have made a task:
:class:`CreateUncertain` says so, and the caller must not create another.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

import httpx
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from rota.errors import RemoteServiceError

TaskType = Literal["InstructText", "Chat", "InstructTextWithFixedDatasets"]
CREATE_PATHS = {"InstructText": "/v1/tasks/create", "Chat": "/v1/tasks/create_chat",
                "InstructTextWithFixedDatasets": "/v1/tasks/create_with_fixed_datasets"}
RUNNING = frozenset({"pending", "preparing_data", "idle", "ready", "looking_for_nodes",
                     "delayed", "evaluating", "preevaluation", "training"})
SUCCESS = "success"
FAILED = frozenset({"failure", "failure_finding_nodes", "prep_task_failure",
                    "node_training_failure"})
#: the Gradients Scheduler's own waits: a create 3 tries from 2 s to 10 s, a read 10 tries
#: from 60 s to 30 min (a task runs for hours: a long outage is waited out)
POST_WAITS_S = (2.0, 4.0)
GET_WAITS_S = (60.0, 120.0, 240.0, 480.0, 960.0, 1800.0, 1800.0, 1800.0, 1800.0)


class GradientsError(RemoteServiceError):
    """The Gradients API refused or failed; ``status`` is its HTTP status (0: no answer)."""


class CreateUncertain(GradientsError):
    """A create whose answer never came (or came as 504): a task may exist."""


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow")


class Created(_Answer):
    task_id: Annotated[str, BeforeValidator(lambda v: str(v) if isinstance(v, int) else v)]
    success: bool | None = None
    created_at: str | None = None
    account_id: str | None = None


class HotkeyDetail(_Answer):
    hotkey: str | None = None
    submission_id: str | None = None
    quality_score: float | None = None
    test_loss: float | None = None
    synth_loss: float | None = None
    repo: str | None = None
    rank: int | None = None
    score_reason: str | None = None


def instruct_body(model_repo: str, url: str | None, hours: int) -> dict[str, Any]:
    """/v1/tasks/create's body: the chunk's columns are Rota's standard ones."""
    return {"model_repo": model_repo, "ds_repo": url, "field_instruction": "instruction",
            "field_input": "input", "field_output": "output", "field_system": None,
            "format": None, "no_input_format": None, "hours_to_complete": hours,
            "file_format": "s3"}


def chat_body(model_repo: str, url: str, hours: int, template: str) -> dict[str, Any]:
    return {"model_repo": model_repo, "ds_repo": url, "chat_template": template,
            "chat_column": "conversations", "chat_role_field": "role",
            "chat_content_field": "content", "chat_user_reference": "user",
            "chat_assistant_reference": "assistant", "hours_to_complete": hours,
            "file_format": "s3"}


def fixed_body(model_repo: str, urls: dict[str, str], hours: int) -> dict[str, Any]:
    return {**instruct_body(model_repo, None, hours), "training_data": urls["train"],
            "test_data": urls["test"], "synthetic_data": urls["synth"]}


def winner(details: Sequence[HotkeyDetail]) -> HotkeyDetail | None:
    """The entry to merge: among those with a repo, a quality score and a test loss that
    is neither missing nor 0, the lowest test loss (then the better rank, then the hotkey,
    so that a tie always goes the same way); None when none qualifies."""
    fit = [d for d in details if d.repo and d.quality_score is not None and d.test_loss]
    if not fit:
        return None
    return min(fit, key=lambda d: (d.test_loss, d.rank if d.rank is not None else 1 << 30,
                                   d.hotkey or ""))


class GradientsApi:
    def __init__(self, url: str, key: str, *, post_waits: Sequence[float] = POST_WAITS_S,
                 get_waits: Sequence[float] = GET_WAITS_S, timeout: float = 60.0,
                 sleep: Callable[[float], None] = time.sleep,
                 say: Callable[[str], None] = print) -> None:
        if not key or not key.isascii() or not key.isprintable() or " " in key:
            # said without the key: httpx's own error would quote the header
            raise GradientsError("the API key is empty or holds characters an HTTP header "
                                 "cannot carry (spaces, line breaks, non-ASCII)")
        self._http = httpx.Client(base_url=url.rstrip("/"), timeout=timeout,
                                  headers={"Authorization": f"Bearer {key}"})
        self._key = key
        self.url = url
        self.post_waits, self.get_waits = tuple(post_waits), tuple(get_waits)
        self.sleep, self.say = sleep, say

    def __repr__(self) -> str:
        return f"GradientsApi({self.url!r})"

    def close(self) -> None:
        self._http.close()

    def create(self, task_type: TaskType, body: dict[str, Any]) -> Created:
        path = CREATE_PATHS[task_type]
        got = self._call("POST", path, body, self.post_waits, create=True)
        try:
            return Created.model_validate(got)
        except ValidationError:  # a 200 made a task, whose id we cannot read
            raise CreateUncertain(f"POST {path}: 200 without a task id in the answer",
                                  status=200) from None

    def task(self, task_id: str) -> dict[str, Any]:
        got = self._call("GET", f"/v1/tasks/{task_id}", None, self.get_waits)
        if not isinstance(got, dict) or not isinstance(got.get("status"), str):
            raise GradientsError(f"GET /v1/tasks/{task_id}: no status in the answer")
        return got

    def auditing(self, task_id: str) -> list[HotkeyDetail]:
        got = self._call("GET", f"/auditing/tasks/{task_id}", None, self.get_waits)
        rows = got.get("hotkey_details") if isinstance(got, dict) else None
        if not isinstance(rows, list):
            raise GradientsError(f"GET /auditing/tasks/{task_id}: no hotkey_details")
        details = []
        for n, row in enumerate(rows):
            try:
                details.append(HotkeyDetail.model_validate(row))
            except ValidationError:  # one odd entry must not lose a paid task's results
                self.say(f"GET /auditing/tasks/{task_id}: entry {n} is not a hotkey detail "
                         "(left out)")
        return details

    def _call(self, method: str, path: str, body: dict[str, Any] | None,
              waits: Sequence[float], *, create: bool = False) -> Any:
        what = f"{method} {path}"
        for attempt, wait in enumerate((*waits, None), start=1):
            err = self._once(what, method, path, body, create)
            if isinstance(err, _Ok):
                return err.value
            if not err.transient or wait is None:
                raise err
            self.say(f"{err}; try {attempt + 1} in {wait:g} s")
            self.sleep(wait)
        raise AssertionError("unreachable")

    def _once(self, what: str, method: str, path: str, body: dict[str, Any] | None,
              create: bool) -> _Ok | GradientsError:
        """One request: its JSON answer, or the error it makes (httpx's translated here)."""
        try:
            answer = self._http.request(method, path, json=body)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as e:
            # never reached the server: nothing was made
            return GradientsError(f"{what}: cannot connect to {self.url}: "
                                  f"{self._scrub(str(e)) or type(e).__name__}", transient=True)
        except (httpx.UnsupportedProtocol, httpx.LocalProtocolError) as e:
            # this side could not send it: nothing was made, and trying again changes nothing
            return GradientsError(f"{what}: cannot send to {self.url}: "
                                  f"{self._scrub(str(e)) or type(e).__name__}")
        except httpx.HTTPError as e:
            if create:  # sent, no (readable) answer: a task may have been made
                raise CreateUncertain(f"{what}: sent, and no answer came "
                                      f"({type(e).__name__})") from None
            return GradientsError(f"{what}: {type(e).__name__}: {self._scrub(str(e))}",
                                  transient=isinstance(e, httpx.TransportError))
        code = answer.status_code
        if code == 200:
            try:
                return _Ok(answer.json())
            except ValueError:
                if create:  # a 200 made a task, whose id we cannot read
                    raise CreateUncertain(f"{what}: 200 with an answer that is not JSON",
                                          status=200) from None
                return GradientsError(f"{what}: the answer is not JSON", status=200)
        message = f"{what}: {code} {answer.reason_phrase}: {self._scrub(_words(answer))}"
        if create and code == 504:
            raise CreateUncertain(f"{message} (a gateway gave up waiting on the server)",
                                  status=code)
        return GradientsError(message, status=code, transient=code >= 500 or code == 429)

    def _scrub(self, text: str) -> str:
        return scrub(text).replace(self._key, "<key>")


class _Ok:
    def __init__(self, value: Any) -> None:
        self.value = value


_QUERY_URL = re.compile(r"\b(https?://[^\s?'\"]*)\?[^\s'\"]*")


def scrub(text: str) -> str:
    """``text`` with every URL's query hidden: a presigned URL's query is a credential, and
    a server's message (a 422's ``input``) may echo the body back."""
    return _QUERY_URL.sub(r"\1?<hidden>", text)


def _words(answer: httpx.Response) -> str:
    """What the server said, short (its JSON ``detail`` when it has one)."""
    try:
        data = answer.json()
        text = str(data.get("detail", data)) if isinstance(data, dict) else str(data)
    except ValueError:
        text = answer.text
    return text.strip()[:300] or "(no message)"
