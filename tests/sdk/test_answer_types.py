"""The typed answers of rota.answers (what RawClient, and so the CLI, reads, and what the
daemon's OpenAPI document is made from) hold to what the daemon sends: every route's answer
is documented as its type, the models it builds answers from agree, and its real answers
are those types, key by key. A field added, removed, renamed or retyped on the server
fails here until the TypedDict follows."""

from __future__ import annotations

import json
import sys
import typing
from collections.abc import Iterator
from typing import Any
from unittest.mock import MagicMock

import pytest
from answer_shapes import differences, of_schema, of_type, strict_adapter
from fastapi.routing import APIRoute
from pydantic import TypeAdapter

from rota import answers as a
from rota.client import RawClient
from rota.core.lifecycle import JobState
from rota.core.spec import JobSpec
from rota_testing import DaemonProcess, kill_job_processes, wait_until

#: the answer each route sends, as its type: (method, path) -> TypedDict
ROUTES: dict[tuple[str, str], Any] = {
    ("post", "/v1/jobs"): a.SubmitAnswer,
    ("get", "/v1/jobs"): a.JobListAnswer,
    ("get", "/v1/quotas"): a.QuotasAnswer,
    ("put", "/v1/quotas"): a.QuotaAnswer,
    ("post", "/v1/quotas/lift"): a.QuotaChangedAnswer,
    ("delete", "/v1/quotas"): a.QuotaChangedAnswer,
    ("get", "/v1/jobs/{job_id}"): a.JobDetailAnswer,
    ("get", "/v1/jobs/{job_id}/events"): a.EventsAnswer,
    ("get", "/v1/jobs/{job_id}/why"): a.WhyAnswer,
    ("get", "/v1/jobs/{job_id}/render"): a.RenderAnswer,
    ("get", "/v1/pools"): a.PoolsAnswer,
    ("post", "/v1/pools/{name}/render"): a.RenderAnswer,
    ("get", "/v1/eval/results"): a.EvalResultsAnswer,
    ("post", "/v1/eval/schedules"): a.EvalScheduleAnswer,
    ("get", "/v1/eval/schedules"): a.EvalSchedulesAnswer,
    ("delete", "/v1/eval/schedules/{schedule_id}"): a.EvalUnscheduledAnswer,
    ("post", "/v1/jobs/{job_id}/cancel"): a.JobStateAnswer,
    ("post", "/v1/jobs/{job_id}/hold"): a.JobStateAnswer,
    ("post", "/v1/jobs/{job_id}/release"): a.JobStateAnswer,
    ("post", "/v1/jobs/{job_id}/preempt"): a.JobStateAnswer,
    ("post", "/v1/jobs/{job_id}/requeue"): a.RequeueAnswer,
    ("get", "/v1/jobs/{job_id}/wait"): a.WaitAnswer,
    ("get", "/v1/jobs/{job_id}/attach"): a.AttachAnswer,
    ("get", "/v1/jobs/{job_id}/logs"): a.LogAnswer,
    ("get", "/v1/jobs/{job_id}/metrics"): a.MetricsPageAnswer,
    ("get", "/v1/jobs/{job_id}/checkpoints"): a.CheckpointsAnswer,
    ("get", "/v1/jobs/{job_id}/card"): a.CardAnswer,
    ("get", "/v1/jobs/{job_id}/artifacts"): a.ArtifactsAnswer,
    ("post", "/v1/jobs/{job_id}/share-links"): a.ShareLinkAnswer,
    ("get", "/v1/share-links"): a.ShareLinksAnswer,
    ("delete", "/v1/share-links/{link_id}"): a.ShareLinkAnswer,
    ("get", "/v1/workspaces"): a.WorkspacesAnswer,
    ("put", "/v1/workspaces/quota"): a.WorkspaceAnswer,
    ("post", "/v1/workspaces/clean"): a.CleanupPlanAnswer,
    ("post", "/v1/workspaces/clean/{plan}/apply"): a.CleanupDoneAnswer,
    ("get", "/v1/datasets"): a.DatasetsAnswer,
    ("get", "/v1/dataset-cache"): a.DatasetCacheAnswer,
    ("get", "/v1/datasets/{name}"): a.DatasetShowAnswer,
    ("delete", "/v1/datasets/{name}"): a.DatasetsRemovedAnswer,
    ("post", "/v1/dataset-uploads"): a.DatasetAddAnswer,
    ("put", "/v1/dataset-uploads/{upload_id}"): a.DatasetChunkAnswer,
    ("put", "/v1/dataset-uploads/{upload_id}/files"): a.DatasetFilesAnswer,
    ("post", "/v1/dataset-uploads/{upload_id}/commit"): a.DatasetAddAnswer,
    ("post", "/v1/dataset-imports"): a.DatasetAddAnswer,
    ("get", "/v1/gpus"): a.GpusAnswer,
    ("post", "/v1/gpus/{index}/pause"): a.GpuPausedAnswer,
    ("post", "/v1/gpus/{index}/resume"): a.GpuPausedAnswer,
    ("post", "/v1/gpus/{index}/simulate"): a.SimulateAnswer,
    ("get", "/v1/health"): a.HealthAnswer,
    ("get", "/v1/whoami"): a.WhoAmIAnswer,
    ("get", "/v1/shares"): a.SharesAnswer,
    ("put", "/v1/shares/{kind}/{name}"): a.SharesAnswer,
    ("get", "/v1/jobs/{job_id}/priority"): a.PriorityAnswer,
    ("get", "/v1/summary"): a.SummaryAnswer,
    ("get", "/v1/tiers"): a.TiersAnswer,
    ("get", "/v1/report"): a.ReportAnswer,
    ("post", "/v1/drain"): a.DrainAnswer,
    ("get", "/v1/queue"): a.QueueAnswer,
    ("get", "/v1/stats"): a.StatsAnswer,
    ("get", "/v1/sessions"): a.SessionsAnswer,
    ("get", "/v1/jobsfile"): a.JobsFileAnswer,
    ("post", "/v1/jobsfile/reload"): a.JobsFileAnswer,
    ("post", "/v1/shutdown"): a.ShutdownAnswer,
    ("get", "/v1/users"): a.UsersAnswer,
    ("post", "/v1/users"): a.UserAnswer,
    ("patch", "/v1/users/{name}"): a.UserAnswer,
    ("delete", "/v1/users/{name}"): a.UserRemovedAnswer,
    ("get", "/v1/tokens"): a.TokensAnswer,
    ("post", "/v1/tokens"): a.NewTokenAnswer,
    ("post", "/v1/tokens/{token_id}/revoke"): a.TokenAnswer,
    ("get", "/v1/secrets"): a.SecretsAnswer,
    ("put", "/v1/secrets/{name}"): a.SecretSetAnswer,
    ("delete", "/v1/secrets/{name}"): a.SecretDeletedAnswer,
    ("get", "/v1/alerts"): a.AlertsAnswer,
    ("post", "/v1/alerts/test"): a.AlertAnswer,
    ("post", "/v1/pipelines"): a.PipelinesAnswer,
    ("get", "/v1/pipelines"): a.PipelinesAnswer,
    ("get", "/v1/pipelines/{name}"): a.PipelineDetailAnswer,
    ("post", "/v1/pipelines/{name}/pause"): a.PipelineAnswer,
    ("post", "/v1/pipelines/{name}/resume"): a.PipelineAnswer,
    ("post", "/v1/pipelines/{name}/run-now"): a.PipelineAnswer,
    ("delete", "/v1/pipelines/{name}"): a.PipelineRemovedAnswer,
}
#: made by the client, not sent as such (RawClient.metrics merges the pages)
CLIENT_MADE = {a.MetricsAnswer}


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    from rota.server.api import build_app

    doc: dict[str, Any] = build_app(MagicMock(), MagicMock()).openapi()
    return doc


def _answer_schema(doc: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    responses = doc["paths"][path][method]["responses"]
    ok = next(r for code, r in responses.items() if code.startswith("2"))
    schema: dict[str, Any] = ok["content"]["application/json"]["schema"]
    return schema


def _nested(tp: Any) -> Iterator[Any]:
    """The TypedDicts inside a type, itself included."""
    if typing.is_typeddict(tp):
        yield tp
        for hint in typing.get_type_hints(tp).values():
            yield from _nested(hint)
    for arg in typing.get_args(tp):
        yield from _nested(arg)


def _json_routes(doc: dict[str, Any]) -> set[tuple[str, str]]:
    """Every operation of the document whose success answer is JSON."""
    return {(method, path) for path, item in doc["paths"].items()
            for method, op in item.items() for code, answer in op["responses"].items()
            if code.startswith("2") and "application/json" in answer.get("content", {})}


def test_every_route_documents_its_answer_as_its_type(openapi: dict[str, Any]) -> None:
    """Each JSON answer in the document is a TypedDict's schema (not a free-form object,
    which would match any type below), and ROUTES names them all."""
    assert _json_routes(openapi) == set(ROUTES)
    named = {k: _answer_schema(openapi, *k).get("$ref", "").rsplit("/", 1)[-1]
             for k in ROUTES}
    assert {k: v for k, v in named.items() if v != ROUTES[k].__name__} == {}


def test_each_route_answers_as_its_type_says(openapi: dict[str, Any]) -> None:
    """The keys, which are required, their JSON types, nested objects and enums are the
    same in the document as in the type; and the document allows no other key."""
    found = {}
    for (method, path), tp in ROUTES.items():
        schema = _answer_schema(openapi, method, path)
        found[(method, path)] = differences(of_type(tp), of_schema(schema, openapi),
                                            f"{method.upper()} {path}")
    assert {k: v for k, v in found.items() if v} == {}
    objects = [s for s in openapi["components"]["schemas"].values() if "properties" in s]
    closed = [s["title"] for s in objects if s.get("additionalProperties") is False]
    assert {t.__name__ for t in _nested_all()} <= set(closed)


def test_answers_are_documented_not_validated() -> None:
    """The documentation costs no request anything: FastAPI serialises each answer as the
    plain dict it is (or the route sends its own Response), never validating it against
    a response model such as the TypedDict."""
    from rota.server.api import ROUTERS

    models = {(method, r.path): r.response_model for router in ROUTERS
              for r in router.routes if isinstance(r, APIRoute) for method in r.methods}
    plain = {None, dict[str, Any]}
    checked = {k: m for k, m in models.items()
               if m not in plain and typing.get_args(m)[:1] != (dict[str, Any],)}
    assert checked == {}
    assert len(models) > 40


def _nested_all() -> set[Any]:
    return {t for tp in ROUTES.values() for t in _nested(tp)}


def test_every_answer_type_is_held_to_the_daemon() -> None:
    """No TypedDict escapes the checks here: each is a route's answer or a part of one."""
    checked = _nested_all() | CLIENT_MADE
    declared = {t for t in (getattr(a, name) for name in a.__all__) if typing.is_typeddict(t)}
    assert sorted(t.__name__ for t in declared - checked) == []
    assert len(declared) > 40


def test_job_states_are_the_daemons(openapi: dict[str, Any]) -> None:
    states = set(typing.get_args(a.JobStateName))
    assert states == {s.value for s in JobState}
    assert states == set(openapi["components"]["schemas"]["JobState"]["enum"])


def test_a_jobs_spec_is_the_spec_model() -> None:
    """GET /v1/jobs/{id} answers ``spec`` as JobSpec's dump: every field, always there,
    as the model serializes it. allowed_gpus is read in several forms (the schema says
    which) and always stored as a list of indices."""
    schema = TypeAdapter(JobSpec).json_schema(mode="serialization")
    theirs = of_schema(schema, {"components": {"schemas": schema.get("$defs", {})}})
    fields = {k: (True, s) for k, (_, s) in theirs[1].items()}  # model_dump: all of them
    fields["allowed_gpus"] = (True, of_type(list[int] | None))
    assert differences(of_type(a.SpecAnswer), ("object", fields), "spec") == []


def test_a_difference_is_told() -> None:
    """The comparison itself: a renamed key, a retyped one, a lost NotRequired."""
    class Wrong(typing.TypedDict):
        pending: str
        runing: int
        held: int
        counts: dict[str, int]

    schema = {"type": "object", "required": ["pending", "running", "held"], "properties": {
        "pending": {"type": "integer"}, "running": {"type": "integer"},
        "held": {"type": "integer"},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}}}}
    assert differences(of_type(Wrong), of_schema(schema, {}), "Q") == [
        "Q.runing: not in the document", "Q.running: missing here",
        "Q.counts: required here, optional in the document",
        "Q.pending: string here, integer in the document"]


# --- real answers --------------------------------------------------------------------------
def _valid(tp: Any, answer: Any) -> None:
    """The answer, as it came over the wire, is a ``tp``: nothing missing or extra, and
    every value of its JSON type (strict: no "1" for 1)."""
    strict_adapter(tp).validate_json(json.dumps(answer), strict=True)


def _answers(c: RawClient) -> dict[str, tuple[Any, Any]]:
    """What the daemon answers about jobs in every state: (type, answer) by name."""
    out: dict[str, tuple[Any, Any]] = {}
    printer = [sys.executable, "-c", "print('step=1 loss=0.5', flush=True); "
               "print('{\"task/acc\": 0.5}', flush=True)"]
    done = c.submit_full([{"command": printer, "gpus": 0.5, "tags": ["t", "eval"]}])
    out["submit"] = (a.SubmitAnswer, done)
    first = done["jobs"][0]["id"]
    out["wait"] = (a.WaitAnswer, c.wait(first, timeout=30))
    held = c.submit([{"command": ["true"], "gpus": 0, "hold": True}])[0]["id"]
    sleeper = c.submit([{"command": ["sleep", "30"], "gpus": 1}])[0]["id"]
    huge = c.submit_full([{"command": ["true"], "gpus": 8}], force=True)
    out["submit forced"] = (a.SubmitAnswer, huge)
    after = c.submit([{"command": ["true"], "gpus": 0, "after": [sleeper]}])[0]["id"]
    tracked = c.submit([{"command": ["true"], "gpus": 0, "hold": True, "mlflow": True,
                         "wandb": True, "wandb_entity": "someone"}])[0]["id"]
    wait_until(lambda: c.job(sleeper)["state"] == "running" and
               c.why(after)["code"] != "not_scheduled", what="a pass over the jobs")
    for name, jid in (("ended", first), ("held", held), ("running", sleeper),
                      ("never", huge["jobs"][0]["id"]), ("after", after),
                      ("tracked", tracked)):
        out[f"job {name}"] = (a.JobDetailAnswer, c.job(jid))
        out[f"why {name}"] = (a.WhyAnswer, c.why(jid))
    out["jobs"] = (a.JobListAnswer, c.request("GET", "/v1/jobs", params={"limit": 50}))
    out["queue"] = (a.QueueAnswer, c.queue(limit=50))
    out["queue without counts"] = (a.QueueAnswer, c.queue(limit=50, counts=False))
    out["queue totals"] = (a.QueueAnswer, c.queue_summary())
    out["events"] = (a.EventsAnswer, c.request("GET", f"/v1/jobs/{first}/events"))
    out["logs"] = (a.LogAnswer, c.logs(first))
    out["metrics"] = (a.MetricsPageAnswer, c.request("GET", f"/v1/jobs/{first}/metrics"))
    out["checkpoints"] = (a.CheckpointsAnswer, c.checkpoints(first))
    out["eval results"] = (a.EvalResultsAnswer, c.eval_results())
    assert c.eval_results()["runs"][0]["metrics"]  # the printer's task/acc: not empty
    config = ("version: 1\nname: typed\nmodel: {uri: /m}\nharness: {kind: heldout, "
              "tasks: [t.jsonl]}\ntracking: {tags: {creator: a, lifecycle: b}}\n")
    every = c.eval_schedule({"config": config, "path": "/x/eval.yaml", "every": "1d",
                             "git_commit": "a" * 40, "git_dirty": False})
    out["eval schedule"] = (a.EvalScheduleAnswer, every)
    out["eval schedule watching"] = (a.EvalScheduleAnswer,
                                     c.eval_schedule({"config": config, "after_job": first}))
    out["eval schedules"] = (a.EvalSchedulesAnswer, c.eval_schedules())
    out["eval unschedule"] = (a.EvalUnscheduledAnswer, c.eval_unschedule(every["id"]))
    pipeline = ("version: 1\nname: typed\nmodel_repo: /m\ndatasets: [{name: /no/such.jsonl, "
                "field_instruction: q, field_output: a}]\ntrain: {gpus: 0}\n")
    out["pipeline add"] = (a.PipelinesAnswer, c.pipeline_add(pipeline, path="/x/p.yaml",
                                                             task=None))
    wait_until(lambda: c.pipeline("typed")["pipeline"]["failures"] == 1, timeout=60,
               what="the pipeline's first round failed (no data)")
    out["pipelines"] = (a.PipelinesAnswer, c.pipelines())
    out["pipeline"] = (a.PipelineDetailAnswer, c.pipeline("typed"))
    assert c.pipeline("typed")["rounds"][0]["jobs"]  # a round with its prep job
    out["pipeline pause"] = (a.PipelineAnswer, c.pipeline_action("typed", "pause",
                                                                 {"reason": "typed"}))
    out["pipeline resume"] = (a.PipelineAnswer, c.pipeline_action("typed", "resume"))
    out["pipeline run-now"] = (a.PipelineAnswer, c.pipeline_action("typed", "run-now"))
    out["pipeline rm"] = (a.PipelineRemovedAnswer, c.pipeline_remove("typed"))
    out["render spec"] = (a.RenderAnswer, c.render_spec({"command": ["true"]}, "local"))
    out["gpus"] = (a.GpusAnswer, c.gpus())
    out["health"] = (a.HealthAnswer, c.health())
    out["whoami"] = (a.WhoAmIAnswer, c.request("GET", "/v1/whoami"))
    out["set share"] = (a.SharesAnswer, c.set_share("typed", 2))
    out["shares"] = (a.SharesAnswer, c.shares())
    out["summary"] = (a.SummaryAnswer, c.request("GET", "/v1/summary"))
    out["stats"] = (a.StatsAnswer, c.stats())
    out["tiers"] = (a.TiersAnswer, c.tiers())
    out["report"] = (a.ReportAnswer, c.report(by="tier", period="week"))
    out["sessions"] = (a.SessionsAnswer, c.request("GET", "/v1/sessions"))
    out["jobs file"] = (a.JobsFileAnswer, c.jobs_file())
    out["hold"] = (a.JobStateAnswer, c.hold(after))
    out["release"] = (a.JobStateAnswer, c.release(after))
    out["requeue"] = (a.RequeueAnswer, c.requeue(first))
    out["preempt"] = (a.JobStateAnswer, c.preempt(sleeper))
    out["cancel"] = (a.JobStateAnswer, c.cancel(held))
    out["pause"] = (a.GpuPausedAnswer, c.pause(3))
    out["resume"] = (a.GpuPausedAnswer, c.resume(3))
    out["drain"] = (a.DrainAnswer, c.drain(False))
    out.update(_access_answers(c))
    return out


def _access_answers(c: RawClient) -> dict[str, tuple[Any, Any]]:
    return {
        "add user": (a.UserAnswer, c.add_user("typed")),
        "new token": (a.NewTokenAnswer, c.create_token("typed", "typed answers")),
        "tokens": (a.TokensAnswer, c.tokens()),
        "revoke": (a.TokenAnswer, c.revoke_token(c.tokens()["tokens"][0]["id"])),
        "users": (a.UsersAnswer, c.users()),
        "set secret": (a.SecretSetAnswer, c.put_secret("TYPED", "x")),
        "secrets": (a.SecretsAnswer, c.secrets()),
        "delete secret": (a.SecretDeletedAnswer, c.delete_secret("TYPED")),
        "remove user": (a.UserRemovedAnswer, c.remove_user("typed")),
        "alerts": (a.AlertsAnswer, c.alerts()),  # a sent one: tests/integration/test_alerts
    }


@pytest.fixture(scope="module")
def real_answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Any]]:
    home = tmp_path_factory.mktemp("typed-answers")
    d = DaemonProcess(home)
    d.env.pop("ROTA_DATABASE_URL", None)
    d.start(timeout=60)
    try:
        with d.client() as c:
            return _answers(c)
    finally:
        d.stop()
        kill_job_processes(home)


def test_real_answers_are_their_types(real_answers: dict[str, tuple[Any, Any]]) -> None:
    """Every answer of a running daemon validates against its TypedDict; the jobs cover
    each kind of reason (held, a pass's, never runnable), a running and an ended job, and
    one with tracker runs."""
    failed = {}
    for name, (tp, answer) in real_answers.items():
        try:
            _valid(tp, answer)
        except ValueError as e:
            failed[name] = str(e)
    assert failed == {}
    jobs = real_answers["queue"][1]
    assert jobs["running_jobs"] and jobs["waiting_jobs"] and jobs["held_jobs"]
    assert real_answers["job ended"][1]["progress"] is not None
    assert set(real_answers["job tracked"][1]["tracking"]) == {"mlflow", "wandb"}
    assert real_answers["why after"][1]["code"] == "dependency"


def test_an_answer_with_an_unknown_key_fails(real_answers: dict[str, tuple[Any, Any]]) -> None:
    """The validation refuses what the type does not declare, deep in an answer too."""
    answer = real_answers["queue"][1]
    waiting = answer["waiting_jobs"][0]
    with pytest.raises(ValueError, match="extra_forbidden"):
        _valid(a.QueueAnswer, {**answer, "waiting_jobs": [{**waiting, "new": 1}]})
    with pytest.raises(ValueError, match="int_type"):
        _valid(a.QueueAnswer, {**answer, "pending": "3"})
