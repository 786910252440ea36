"""Accepting work: validation beyond the spec's own, GPU needs from --llm, de-duplication,
and the watched jobs file."""

from __future__ import annotations

import logging
import math
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from rota.backends import engines
from rota.core.feasibility import never_runnable, never_typed, type_scope
from rota.core.lifecycle import JobState
from rota.core.snapshot import to_milli
from rota.core.spec import JobSpec, parse_spec
from rota.core.tiers import choose, no_fit
from rota.errors import InvalidSpec, NotFound
from rota.jobsfile import JobsFileEntry, JobsFileWatcher
from rota.ml.estimate import LlmTable, estimate_llm
from rota.pools import LOCAL, Pool, no_workspace
from rota.server.access.accounts import AccountRules
from rota.server.api.pool_reads import engine_job
from rota.store.repo import JobRecord
from rota.templates import missing_modules
from rota.units import format_memory

if TYPE_CHECKING:
    from collections.abc import Callable

    from rota.config import Settings
    from rota.devices.base import GpuReading
    from rota.server.access.secrets import Secrets
    from rota.server.loop.backend_set import BackendSet
    from rota.server.loop.launcher import Launcher
    from rota.server.storage.datasets import Datasets
    from rota.server.tracking.trackers import Tracking
    from rota.store.repo import Store


class IntakePort(Protocol):
    """What intake needs of the daemon (which is one): its settings, store, secrets,
    trackers, datasets, engines and accounts' rights; its clock, GPUs and whether it
    drains; and a door for the jobs it stores (``accept``)."""

    settings: Settings
    store: Store
    secrets: Secrets
    tracking: Tracking
    datasets: Datasets
    backends: BackendSet
    launcher: Launcher
    clock: Callable[[], float]
    draining: bool

    @property
    def readings(self) -> dict[int, GpuReading]: ...
    def job_state(self, job_id: int) -> JobState: ...
    def accept(self, rows: list[JobRecord], specs: Sequence[JobSpec] = ()) -> None: ...

GIB = 1 << 30
DRAINING = "the daemon is draining: no job starts until `rota drain --off`"

log = logging.getLogger("rota.intake")


@dataclass
class JobsFileStatus:
    path: str
    loaded_at: float | None = None
    queued: list[int] = field(default_factory=list)
    skipped_duplicates: int = 0
    #: lines not queued again: each ran before as ``job`` (now in ``state``)
    ran_before: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)



class Unknown:
    """Not looked up yet (``Intake.prepare``'s account)."""


UNKNOWN = Unknown()

class Intake:
    def __init__(self, daemon: IntakePort) -> None:
        self.daemon = daemon
        self.accounts = AccountRules.here(daemon.settings.user, daemon.settings.shared_account)
        self.settings = daemon.settings
        self.llm_table = LlmTable.load(self.settings.llm_config_path)
        self.watcher = JobsFileWatcher(self.settings.jobs_file_path)
        self.jobs_file = JobsFileStatus(path=str(self.settings.jobs_file_path))

    # --- submit --------------------------------------------------------------------------
    def prepare(self, given: JobSpec | dict[str, Any], *, user: str, where: str = "",
                force: bool = False, account: str | Unknown | None = UNKNOWN) -> JobSpec:
        """Validate one spec and fill in what the daemon knows (GPU needs from --llm);
        refuse one this machine can never run (unless ``force``) or whose template's
        Python packages are missing here."""
        spec = given if isinstance(given, JobSpec) else parse_spec(given, where=where)
        asked = spec.model_fields_set if isinstance(given, JobSpec) else set(given)
        prefix = f"{where}: " if where else ""
        self.daemon.tracking.check(spec, user, prefix)
        if spec.llm and "gpus" not in asked:
            spec = self._resolve_llm(spec, prefix)
        pool_name, pool = self.settings.pool_set.get(spec.pool)  # InvalidSpec names them
        self._check_tier(spec, prefix)
        if isinstance(account, Unknown):
            account = self.accounts.account_in(self.daemon.store, user)  # Forbidden: never
        if account is not None:
            self._check_run_as(spec, account, pool_name, pool, prefix)
        spec = self.daemon.datasets.resolve(
            spec, user, prefix, engine=None if pool.engine == LOCAL else pool.engine)
        if pool.engine != LOCAL:
            return self._for_engine(spec, pool_name, pool, user, prefix)
        _check_this_machine(spec, prefix)
        if spec.gpu_type is not None:
            spec = self._typed(spec, prefix, force=force)
        for template, missing in missing_modules(spec.tags).items():
            raise InvalidSpec(f"{prefix}template {template!r} needs {', '.join(missing)}, "
                              f"which {'is' if len(missing) == 1 else 'are'} not installed "
                              "here: pip install 'rota[ml]'", field="template")
        if not force:
            why = never_runnable(to_milli(spec.gpus), spec.gpu_mem, spec.allowed_gpus,
                                 {i: g.memory_total for i, g in self.daemon.readings.items()})
            if why is not None:
                raise InvalidSpec(f"{prefix}{why}; --force queues it anyway, to wait until "
                                  "the GPUs change", field="gpus")
        if spec.conda and not (os.environ.get("CONDA_EXE") or shutil.which("conda")):
            raise InvalidSpec(f"{prefix}conda: environment {spec.conda!r} requested but conda "
                              "is not installed on this machine", field="conda")
        unrunnable = self.daemon.backends.refusal(spec)  # the backend's capabilities
        if unrunnable is not None:
            where = "image" if spec.image else "session"  # a container job's backend: Docker
            raise InvalidSpec(f"{prefix}{where}: {unrunnable}", field=where)
        if spec.outputs and not spec.cwd and not all(map(os.path.isabs, spec.outputs)):
            raise InvalidSpec(f"{prefix}outputs: a relative folder is the job's cwd's, and "
                              "the job names no cwd", field="outputs")
        if spec.cwd and not self.daemon.launcher.files_of(user).can_enter(spec.cwd):
            # looked at with the rights the job will run with: a folder it could not enter
            # is refused now, and root's view of a path is never told to a user
            whose = "" if account is None else f" that {account} can enter"
            raise InvalidSpec(f"{prefix}cwd: {spec.cwd!r} is not a directory{whose}",
                              field="cwd")
        self._check_dependencies(spec, prefix)
        return spec

    def _check_tier(self, spec: JobSpec, prefix: str) -> None:
        """The tier it names fits it; with tier_required, some tier fits it."""
        tiers = self.settings.tier_set
        try:
            chosen = choose(tiers, spec)
        except InvalidSpec as e:
            raise InvalidSpec(f"{prefix}{e}", field="tier") from None
        if chosen is None and self.settings.tier_required:
            raise InvalidSpec(f"{prefix}tier: the job fits no tier ({no_fit(tiers, spec)}), "
                              "and tier_required is set", field="tier")

    def _check_run_as(self, spec: JobSpec, account: str, pool_name: str, pool: Pool,
                      prefix: str) -> None:
        """The job runs as ``account``: its backend must be one that starts a job so."""
        engine = pool.engine
        if engine == LOCAL:
            backend = self.daemon.backends.get(self.daemon.backends.name_of(spec))
            if backend.capabilities.run_as:
                return
            what = f"{backend.name} sessions"
        else:
            found = engines.capabilities(pool, self.settings.home)
            if found is not None and found.run_as:
                return
            what = f"pool {pool_name} ({engine})"
        raise InvalidSpec(f"{prefix}{what} cannot start a job as another Unix account yet, "
                          f"and this job would run as {account}: run it as a plain process "
                          "or a container (docs/security.md)", field="pool")

    def _typed(self, spec: JobSpec, prefix: str, *, force: bool) -> JobSpec:
        """A GPU type on this machine: the GPUs whose name holds it (any case) become the
        job's allowed GPUs (within those it gave), which the scheduler keeps to; the type
        stays in the spec as asked. Matched now, against the GPUs there are, so ``force``
        cannot queue a job for a type no GPU here is."""
        assert spec.gpu_type is not None
        names = {i: g.name for i, g in self.daemon.readings.items()}
        why = never_typed(spec.gpu_type, to_milli(spec.gpus), spec.allowed_gpus, names)
        if why is not None:
            also = ("; --force cannot queue it: a type is matched against this machine's GPUs "
                    "when the job is submitted") if force else ""
            raise InvalidSpec(f"{prefix}gpu_type: {why}{also}", field="gpu_type")
        scope = type_scope(spec.gpu_type, spec.allowed_gpus, names)
        return spec.model_copy(update={"allowed_gpus": sorted(scope)})

    def _for_engine(self, spec: JobSpec, pool_name: str, pool: Pool, user: str,
                    prefix: str) -> JobSpec:
        """A job for a cluster pool: its engine places it, so this machine's GPUs, conda
        and sessions do not matter; what the engine cannot honour is refused now, in its
        words, never dropped. The pool is named in the stored spec, so a later change of
        default_pool does not move it."""
        if spec.outputs:
            raise InvalidSpec(f"{prefix}outputs: are saved for jobs on this machine's pool "
                              f"only; a {pool.engine} pool's job does not save them yet "
                              "(docs/storage.md): save them from the job itself",
                              field="outputs")
        if spec.session != "none":
            raise InvalidSpec(f"{prefix}session: a {pool.engine} pool runs no tmux or screen "
                              "sessions", field="session")
        if spec.allowed_gpus is not None:
            raise InvalidSpec(f"{prefix}allowed_gpus: GPU indices are this machine's; on a "
                              f"{pool.engine} pool the engine picks the GPUs on its nodes: "
                              "drop allowed_gpus (gpu_type asks for a kind of GPU)",
                              field="allowed_gpus")
        if spec.cuda_arg:
            raise InvalidSpec(f"{prefix}cuda_arg: --cuda carries the indices of the GPUs Rota "
                              f"picked on this machine; on a {pool.engine} pool the engine "
                              "picks them, and the job sees only those (CUDA devices 0 to "
                              "n-1): drop cuda_arg", field="cuda_arg")
        if spec.workspace and self.settings.workspace_kind(pool_name) is None:
            # offered, never required: only a job that asks for one is refused here; any
            # other runs without (stored so: `rota show` says so, no quota holds it)
            if "workspace" in spec.model_fields_set:
                raise InvalidSpec(f"{prefix}workspace: {no_workspace(pool_name, pool)}",
                                  field="workspace")
            spec = spec.model_copy(update={"workspace": False})
        why = engines.refusal(pool, engine_job(0, user, spec, attempt=1),
                              work_dir=self.settings.home)
        if why is not None:
            raise InvalidSpec(f"{prefix}pool {pool_name}: {why}", field="pool")
        self._check_dependencies(spec, prefix)
        return spec if spec.pool == pool_name else spec.model_copy(update={"pool": pool_name})

    def _check_dependencies(self, spec: JobSpec, prefix: str) -> None:
        for dep in spec.after:
            try:
                self.daemon.job_state(dep)
            except NotFound:
                raise InvalidSpec(f"{prefix}after: there is no job {dep}",
                                  field="after") from None

    def _resolve_llm(self, spec: JobSpec, prefix: str) -> JobSpec:
        gpu_mem = max((g.memory_total for g in self.daemon.readings.values()), default=0)
        if not gpu_mem:
            raise InvalidSpec(f"{prefix}llm: no GPUs to size {spec.llm!r} against", field="llm")
        try:
            est = estimate_llm(spec.llm or "", table=self.llm_table, gpu_memory=gpu_mem)
        except InvalidSpec as e:
            raise InvalidSpec(f"{prefix}{e}", field="llm") from None
        update: dict[str, Any] = {"gpus": est.gpus}
        if est.gpu_mem is not None and spec.gpu_mem is None:
            update["gpu_mem"] = est.gpu_mem
        return JobSpec.model_validate({**spec.model_dump(), **update})

    def submit(self, given: Sequence[JobSpec | dict[str, Any]], *, user: str, source: str,
               idempotency_key: str | None = None, dedup: bool = False, force: bool = False,
               numbered: bool = True) -> list[JobRecord]:
        """All or nothing: every spec is checked before any is stored. An error about one
        starts ``jobs[i]: `` (unless not ``numbered``)."""
        if idempotency_key:  # sent again (its answer was lost): what it made then
            made = self.daemon.store.jobs_by_idempotency_key(idempotency_key)
            if made:
                return made
        if not given:
            raise InvalidSpec("no job given", field="jobs")
        account = self.accounts.account_in(self.daemon.store, user)  # Forbidden: never runs
        specs = [self.prepare(g, user=user, where=f"jobs[{n}]" if numbered else "",
                              force=force, account=account)
                 for n, g in enumerate(given)]
        # --secret-env values are stored sealed; equal ones still de-duplicate (their tag)
        specs = [self.daemon.secrets.seal(s) for s in specs]
        if dedup:
            live = self.daemon.store.live_hashes(s.content_hash() for s in specs)
            specs = [s for s in specs if s.content_hash() not in live]
        if not specs:
            return []
        rows = self.daemon.store.add_jobs(specs, user=user, source=source,
                                          now=self.daemon.clock(),
                                          idempotency_key=idempotency_key)
        self.daemon.accept(rows, specs)
        return rows

    def warnings(self, rows: list[JobRecord]) -> list[str]:
        """What a person who just submitted these should know: the daemon drains, or a
        request far from what the last job of the same name used."""
        out = [DRAINING] if rows and self.daemon.draining else []
        return out + self.sizing_warnings(rows)

    def sizing_warnings(self, rows: list[JobRecord]) -> list[str]:
        """Jobs named like an earlier one whose request is far from what that one used."""
        total = max((g.memory_total for g in self.daemon.readings.values()), default=0)
        if not total:
            return []
        peaks = self.daemon.store.last_peaks(row.name for row in rows if row.name)
        out: list[str] = []
        for row in rows:
            last = peaks.get(row.name) if row.name else None
            if last is None:
                continue
            warning = sizing_warning(row.id, row.name, gpus=row.gpus, gpu_mem=row.gpu_mem,
                                     gpu_total=total, last_job=last[0], peak=last[1])
            if warning:
                out.append(warning)
        return out

    # --- the watched jobs file -----------------------------------------------------------
    def poll_jobs_file(self, *, force: bool = False,
                       again: Sequence[int] = ()) -> JobsFileStatus:
        """Queue new lines of the jobs file; report bad lines with their numbers.

        A line runs once: one whose job (found by its content in the store, so across
        restarts) ended in any way is not queued again when the file is read again, unless
        its text changes or its number is in ``again`` (`rota add --again`).
        """
        if force or again:
            self.watcher = JobsFileWatcher(self.settings.jobs_file_path)
        parsed = self.watcher.poll()
        if parsed is None:
            return self.jobs_file
        status = JobsFileStatus(path=self.jobs_file.path, loaded_at=self.daemon.clock())
        for e in parsed.errors:
            self._file_error(status, e.line, e.message)
        keys = [self._stored_keys(e) for e in parsed.entries]
        every = [k for ks in keys for k in ks]
        live = self.daemon.store.live_hashes(every)
        ran = self.daemon.store.jobs_from_file(status.path, every)
        asked = set(again)
        seen: set[str] = set()
        for entry, ks in zip(parsed.entries, keys, strict=True):
            prior = next((ran[k] for k in ks if k in ran), None)
            if entry.line in asked:
                if prior is not None and not JobState(prior[1]).terminal:
                    self._file_error(status, entry.line, f"not run again: job {prior[0]} of "
                                                         f"this line is still {prior[1]}")
                    continue
            elif prior is not None:
                status.ran_before.append({"line": entry.line, "job": prior[0],
                                          "state": prior[1]})
                continue
            elif any(k in live or k in seen for k in ks):
                status.skipped_duplicates += 1
                continue
            seen.add(ks[0])
            try:
                rows = self.submit([entry.spec], user=self.settings.user,
                                   source=f"{status.path}:{entry.line}", numbered=False)
            except InvalidSpec as e:
                self._file_error(status, entry.line, str(e))
                continue
            status.queued.extend(r.id for r in rows)
        lines = {e.line for e in parsed.entries} | {e.line for e in parsed.errors}
        for line in sorted(asked - lines):
            self._file_error(status, line, "--again: no job on this line")
        status.errors.sort(key=lambda e: e["line"])
        self.jobs_file = status
        return status

    def _stored_keys(self, entry: JobsFileEntry) -> tuple[str, ...]:
        """The content hashes a line's job may be stored under: as stored now (secret
        values by their tag) and, for a line with secret values, as stored before values
        were sealed (its job then is not run again after an upgrade)."""
        if not entry.spec.secret_env:
            return (entry.key,)
        return (self.daemon.secrets.seal(entry.spec).content_hash(), entry.key)

    def _file_error(self, status: JobsFileStatus, line: int, message: str) -> None:
        """A line that was not queued: in the file's status and as a ``jobsfile_error``
        event (`rota events`), whether the reader or the daemon refused it."""
        status.errors.append({"line": line, "message": message})
        self.daemon.store.add_event(job_id=None, kind="jobsfile_error", now=self.daemon.clock(),
                                    message=f"{status.path}:{line}: {message}")


def sizing_warning(job_id: int, name: str, *, gpus: float, gpu_mem: int | None, gpu_total: int,
                   last_job: int, peak: int) -> str | None:
    """A warning when a request (memory per GPU, or the share of one) is far above what the
    last run of the same name used (more than twice, and at least 4 GiB over) or below it."""
    if gpus <= 0:
        return None
    asked = gpu_mem if gpu_mem else int(min(gpus, 1.0) * gpu_total)
    used = f"job {last_job}, the last {name!r}, peaked at {format_memory(peak)} per GPU"
    if asked < peak:
        return (f"job {job_id} asks {format_memory(asked)} per GPU but {used}: it may run "
                "out of memory")
    if asked > 2 * peak and asked - peak >= 4 * GIB:
        return (f"job {job_id} asks {format_memory(asked)} per GPU but {used}: "
                f"--gpu-mem {format_memory(math.ceil(peak * 1.5 / GIB) * GIB)} would do")
    return None


def _check_this_machine(spec: JobSpec, prefix: str) -> None:
    """What this machine cannot honour: more than one node; limits without a container."""
    if spec.nodes > 1 or spec.procs_per_node:
        field = "nodes" if spec.nodes > 1 else "procs_per_node"
        raise InvalidSpec(f"{prefix}{field}: this machine is one node and starts the job's "
                          "command once (torchrun in it starts its ranks): --pool a cluster "
                          "for a multi-node job", field=field)
    fetched = [f for f in ("files", "model") if getattr(spec, f)]
    if fetched:
        raise InvalidSpec(f"{prefix}{', '.join(fetched)}: put into the job's pod by a "
                          "Kubernetes pool (a ConfigMap, an init container); on this machine "
                          "the job reads its files and its model where they are: name their "
                          "paths in its command", field=fetched[0])
    limits = [f for f in ("cpus", "memory", "network") if getattr(spec, f)]
    if limits and not spec.image:
        raise InvalidSpec(f"{prefix}{', '.join(limits)}: limits a container or a cluster's "
                          "engine enforces; on this machine a plain process has none: give "
                          "--image, or --pool a cluster", field=limits[0])
    if spec.image and spec.session != "none":
        raise InvalidSpec(f"{prefix}session: a container job runs in no tmux or screen "
                          "session", field="session")
