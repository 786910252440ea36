"""GET /v1/queue and `rota queue`: the jobs on GPUs, then the waiting ones in the order the
scheduler will start them (a page of them, with the total), then the held ones."""

from __future__ import annotations

import json
from typing import Any

from rota_testing import wait_until


def _submit(c: Any, jobs: list[dict[str, Any]], force: bool = False) -> list[int]:
    got = c.request("POST", "/v1/jobs", json={"jobs": jobs, "force": force})
    return [j["id"] for j in got["jobs"]]


def test_queue_pages_in_start_order_with_reasons(daemon: Any) -> None:
    with daemon.client() as c:
        [blocker] = _submit(c, [{"command": ["sleep", "60"], "gpus": 4}])
        wait_until(lambda: c.job(blocker)["state"] == "running")
        late = _submit(c, [{"command": ["true"], "gpus": 1, "priority": p, "name": f"p{p}"}
                           for p in (5, 1, 5, 0)])
        [never] = _submit(c, [{"command": ["true"], "gpus": 8, "name": "never"}], force=True)
        [held] = _submit(c, [{"command": ["true"], "hold": True, "name": "held"}])
        # priority first, then submission; the job that can never start last
        order = [late[3], late[1], late[0], late[2], never]
        wait_until(lambda: [j["id"] for j in c.queue(limit=10)["waiting_jobs"]] == order)
        page = c.queue(limit=2)
        assert [j["id"] for j in page["running_jobs"]] == [blocker]
        assert [j["id"] for j in page["waiting_jobs"]] == order[:2]
        assert page["pending"] == 5 and page["next_offset"] == 2
        assert page["held"] == 1 and [j["id"] for j in page["held_jobs"]] == [held]
        assert page["counts"]["pending"] == 5 and page["counts"]["running"] == 1
        assert all(j["reason"]["code"] == "resources" for j in page["waiting_jobs"])
        rest = c.queue(limit=10, offset=2)
        assert [j["id"] for j in rest["waiting_jobs"]] == order[2:]
        assert rest["next_offset"] is None
        assert rest["waiting_jobs"][-1]["reason"]["code"] == "unsatisfiable"
        assert "only 4 GPUs exist" in rest["waiting_jobs"][-1]["reason"]["message"]
        assert "only 4 GPUs exist" in c.why(never)["message"]
        totals = c.queue_summary()  # limit 0: the totals alone, as before
        assert totals["pending"] == 5 and "waiting_jobs" not in totals
        lean = c.queue(limit=1, counts=False)  # what `rota queue` asks: no table scan
        assert "counts" not in lean and lean["held"] == 1 and lean["pending"] == 5

        r = daemon.cli("queue", "--limit", "2")
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        at = {jid: next(n for n, line in enumerate(lines) if line.split()[:1] == [str(jid)])
              for jid in (blocker, *order[:2], held)}
        assert at[blocker] < at[order[0]] < at[order[1]] < at[held]
        assert "… and 3 more waiting (rota queue --all / --limit N)" in r.stdout
        data = json.loads(daemon.cli("queue", "--json", "--limit", "2").stdout)
        # one list in the table's order, the totals beside it
        assert [j["id"] for j in data["jobs"]] == [blocker, *order[:2], held]
        assert data["pending"] == 5 and data["held"] == 1 and data["next_offset"] == 2
        assert "waiting_jobs" not in data
        for j in (*late, never, held, blocker):  # the blocker last: nothing starts and ends
            c.cancel(j)


def test_a_job_set_aside_as_never_runnable_starts_once_the_machine_can_hold_it(
        daemon: Any) -> None:
    with daemon.client() as c:
        c.simulate(3, present=False)  # 3 GPUs left: a 4-GPU job can never start now
        try:
            [four] = _submit(c, [{"command": ["sleep", "30"], "gpus": 4}], force=True)
            wait_until(lambda: c.why(four)["code"] == "unsatisfiable")
            assert "only 3 GPUs exist" in c.why(four)["message"]
            [small] = _submit(c, [{"command": ["true"], "gpus": 1}])
            assert c.wait(small, timeout=20)["state"] == "completed"  # the rest runs on
        finally:
            c.simulate(3, present=True)
        wait_until(lambda: c.job(four)["state"] == "running")  # taken back into the passes
        c.cancel(four)
