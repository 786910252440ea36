"""Slurm's answers (squeue, sacct, scontrol, sinfo) as Rota's values. Pure functions.

The engine asks for ``|``-separated columns (``squeue -o``, ``sacct -P``, ``sinfo -O``); a
row here is one job as one source saw it, :func:`status` turns it into an EngineStatus.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from datetime import datetime

from rota.backends.engine import EngineState, EngineStatus, PoolHealth

#: Slurm job states (squeue's %T, sacct's State, scontrol's JobState) by what they mean here.
QUEUED_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                           "RESV_DEL_HOLD", "SPECIAL_EXIT"})
ENDED_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                          "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "REVOKED"})
#: Node states whose free GPUs can take a job (sinfo's StateLong, flags stripped).
USABLE_NODE_STATES = frozenset({"idle", "mixed", "allocated", "completing"})
_NO_VALUE = frozenset({"", "N/A", "Unknown", "None", "(null)", "None assigned"})
#: Ends that are the cluster's doing, not the job's: Slurm preempted it, or its node failed
#: or never booted. With --no-requeue Slurm ends the job; Rota runs it again.
TAKEN_BACK_STATES = frozenset({"PREEMPTED", "NODE_FAIL", "BOOT_FAIL"})


@dataclass(frozen=True, slots=True)
class JobRow:
    engine_id: str
    state: str  # Slurm's words: "PENDING", "CANCELLED by 0", ...
    reason: str | None = None
    started: str | None = None
    ended: str | None = None
    node_list: str | None = None
    exit_code: str | None = None  # "code:signal"; squeue has none
    name: str | None = None
    dependency: str | None = None  # squeue's %E: "afterok:12(unfulfilled)"
    raw_id: str | None = None  # squeue's %A: an array task's own job id once it has one

    @property
    def base_state(self) -> str:
        return self.state.split(" ", 1)[0].rstrip("+")

    @property
    def ended_here(self) -> bool:
        return self.base_state in ENDED_STATES


def _value(text: str | None) -> str | None:
    text = (text or "").strip()
    return None if text in _NO_VALUE else text


def rows(stdout: str, fields: tuple[str, ...]) -> list[JobRow]:
    """``|``-separated lines whose columns are ``fields`` (JobRow attribute names)."""
    out = []
    for line in stdout.splitlines():
        cols = line.rstrip("\n").split("|")
        if len(cols) < len(fields) or not cols[0].strip():
            continue
        values = {f: _value(c) for f, c in zip(fields, cols, strict=False)}
        values.pop("engine_id", None)
        state = values.pop("state", None) or "UNKNOWN"
        out.append(JobRow(engine_id=cols[0].strip(), state=state, **values))
    return out


def scontrol_row(stdout: str) -> JobRow | None:
    """``scontrol show job ID`` (key=value words) as a row; None when it names no job."""
    kv = dict(re.findall(r"(\w+)=(\S*)", stdout))
    if "JobId" not in kv:
        return None
    task = kv.get("ArrayTaskId", "")
    engine_id = f"{kv['ArrayJobId']}_{task}" if task.isdigit() and "ArrayJobId" in kv \
        else kv["JobId"]  # an array's task by the id Rota follows it by
    return JobRow(engine_id=engine_id, state=kv.get("JobState", "UNKNOWN"),
                  reason=_value(kv.get("Reason")), started=_value(kv.get("StartTime")),
                  ended=_value(kv.get("EndTime")), node_list=_value(kv.get("NodeList")),
                  exit_code=_value(kv.get("ExitCode")), name=kv.get("JobName"))


def timestamp(text: str | None) -> float | None:
    """Slurm's local ISO time (``2026-11-25T01:35:58``) as Unix time."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def exit_of(row: JobRow) -> tuple[int | None, int | None]:
    """(exit code, signal) from ``code:signal``. A job killed by a signal has no exit code,
    and a job Slurm does not call COMPLETED never reads as exit 0 (a cancelled job that
    never ran records 0:0)."""
    m = re.fullmatch(r"(\d+):(\d+)", row.exit_code or "")
    if m is None:
        return (0, None) if row.base_state == "COMPLETED" else (None, None)
    code, sig = int(m.group(1)), int(m.group(2))
    if sig:
        return None, sig
    if code == 0 and row.base_state != "COMPLETED":
        return None, None
    return code, None


def state_of(row: JobRow) -> EngineState:
    if row.base_state in QUEUED_STATES:
        return EngineState.QUEUED
    if row.base_state in ENDED_STATES:
        return EngineState.ENDED
    return EngineState.RUNNING  # RUNNING, COMPLETING, SUSPENDED, SIGNALING, STAGE_OUT, ...


#: Slurm's reason for a job it cancelled because a job it depended on cannot end as needed
#: (``--kill-on-invalid-dep=yes``)
NEVER_SATISFIED = "DependencyNeverSatisfied"


def merged(ended: JobRow | None, live: JobRow | None) -> JobRow | None:
    """An ended job's record (sacct: its exit code) with squeue's reason where the record
    has none (``sacct -c`` keeps no reason)."""
    if ended is None or live is None or ended.reason is not None:
        return ended or live
    return dataclasses.replace(ended, reason=live.reason)


def _waiting_reason(row: JobRow) -> str | None:
    """Slurm's REASON; for a dependency, the jobs it waits for (%E: afterok:12(unfulfilled))."""
    if row.reason != "Dependency" or not row.dependency:
        return row.reason
    waits = re.findall(r"afterok:(\d+(?:_\d+)?)\(unfulfilled\)", row.dependency)
    if not waits:
        return f"Dependency ({row.dependency})"
    jobs = f"job {waits[0]} has" if len(waits) == 1 else f"jobs {', '.join(waits)} have"
    return f"Dependency (it starts once Slurm {jobs} completed)"


def status(row: JobRow) -> EngineStatus:
    state = state_of(row)
    if state is EngineState.QUEUED:
        return EngineStatus(row.engine_id, state, reason=_waiting_reason(row))
    nodes = tuple(expand_hostlist(row.node_list)) if row.node_list else ()
    # a job cancelled while it waited has a start time (its end's) but never had nodes
    started = timestamp(row.started) if nodes or state is EngineState.RUNNING else None
    if state is EngineState.RUNNING:
        reason = None if row.base_state == "RUNNING" else row.state
        return EngineStatus(row.engine_id, state, reason=reason, started_at=started,
                            nodes=nodes)
    code, sig = exit_of(row)
    reason = row.state if row.reason in (None, row.state) else f"{row.state} ({row.reason})"
    return EngineStatus(row.engine_id, state, reason=reason, started_at=started,
                        ended_at=timestamp(row.ended), exit_code=code, signal=sig, nodes=nodes,
                        unmet_dependency=row.reason == NEVER_SATISFIED and not nodes,
                        preempted=row.base_state in TAKEN_BACK_STATES)


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside brackets and parentheses: ``n[1-2],gpu:2(IDX:0,1)``."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in parts if p]


def expand_hostlist(text: str) -> list[str]:
    """``node[01-03,7],gpu5`` -> node01 node02 node03 node7 gpu5 (one bracket per name)."""
    out: list[str] = []
    for part in split_top(text):
        m = re.fullmatch(r"([^\[]*)\[([^\]]+)\](.*)", part)
        if m is None or "[" in m.group(3):
            out.append(part)
            continue
        head, ranges, tail = m.groups()
        for item in ranges.split(","):
            lo, _, hi = item.partition("-")
            width = len(lo)
            for n in range(int(lo), int(hi or lo) + 1):
                out.append(f"{head}{n:0{width}d}{tail}")
    return out


def gres_counts(text: str | None) -> dict[str, int]:
    """``gpu:a100:2(S:0-1),shard:8`` -> {"gpu": 2, "shard": 8} (types summed by name)."""
    counts: dict[str, int] = {}
    for item in split_top(_value(text) or ""):
        item = re.sub(r"\([^()]*\)$", "", item.strip())
        name, *rest = item.split(":")
        if rest and rest[-1].isdigit():
            counts[name] = counts.get(name, 0) + int(rest[-1])
    return counts


def health(stdout: str, gres: str) -> PoolHealth:
    """``sinfo -N -O NodeList,StateLong,Gres,GresUsed`` (``|``-separated) as PoolHealth."""
    nodes: dict[str, tuple[str, int, int]] = {}
    for line in stdout.splitlines():
        cols = line.split("|")
        if len(cols) >= 4 and cols[0].strip():
            total = gres_counts(cols[2]).get(gres, 0)
            used = gres_counts(cols[3]).get(gres, 0)
            nodes[cols[0].strip()] = (cols[1].strip(), total, used)
    if not nodes:
        return PoolHealth(reachable=True, message="Slurm answers but lists no nodes", nodes=0,
                          gpus_total=0, gpus_free=0)
    total = sum(t for _, t, _ in nodes.values())
    free = sum(max(0, t - u) for s, t, u in nodes.values() if _usable(s))
    up = sum(1 for s, _, _ in nodes.values() if _usable(s))
    return PoolHealth(reachable=True, nodes=len(nodes), gpus_total=total, gpus_free=free,
                      message=f"{up}/{len(nodes)} nodes up, {free}/{total} GPUs free")


def _usable(state: str) -> bool:
    return "*" not in state and state.rstrip("~#!%$@^-+") in USABLE_NODE_STATES


def shards_per_gpu(stdout: str, gres: str) -> int | None:
    """Shards per GPU on the first node that has both (sinfo output as for :func:`health`)."""
    for line in stdout.splitlines():
        cols = line.split("|")
        if len(cols) >= 3:
            counts = gres_counts(cols[2])
            if counts.get(gres) and counts.get("shard"):
                return max(1, counts["shard"] // counts[gres])
    return None


#: srun's own line for a task that ended with a code: "srun: error: node2: task 1: Exited
#: with exit code 3" ("tasks 0-1:" when several ended alike)
_TASK_EXIT = re.compile(rb"^srun: error: [^:\n]+: tasks? [0-9,\-\[\]]+: Exited with exit code "
                        rb"(\d+)$", re.MULTILINE)


def first_failed_task(log_tail: bytes) -> int | None:
    """The exit code of the first task srun says failed, from the end of a job's log; None
    when it says none did."""
    for m in _TASK_EXIT.finditer(log_tail):
        code = int(m.group(1))
        if code:
            return code
    return None
