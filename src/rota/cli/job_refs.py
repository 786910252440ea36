"""A job named on the command line by its id (`7`) or by its name (`train[lr=1e-3]`).

A name is looked up through the job list, and is the name as shown: the one given, else
the command (`python train.py`). When several jobs share it, the one that is still active
wins if it is the only active one (`rota cancel train` means the job that runs, not last
week's); otherwise the name is ambiguous and the error lists the ids.

Where a command acts on several jobs (`rota cancel A B C`), a name that no job has but
that is a sweep's base name (`train` for `train[lr=1e-3]`, `train[lr=3e-4]`) picks the
sweep's active jobs (``picked``); the command shows them and asks first, as a filter does.
"""

from __future__ import annotations

from rota.errors import InvalidSpec, NotFound

TYPE_CHECKING = False  # typing's, without importing typing (rota.cli starts faster)

if TYPE_CHECKING:
    from rota.answers import JobAnswer
    from rota.client import RawClient as Client

ACTIVE = ("pending", "held", "starting", "running", "preempted")
_LOOKUP_LIMIT = 1000


def resolve(c: Client, ref: str | int) -> int:
    """The id of the job ``ref`` names."""
    text = str(ref).strip()
    if text.isdigit():
        return int(text)
    if not text:
        raise InvalidSpec("a job is given as an empty string: give its id or its name",
                          field="job")
    # the list filter matches names that contain the text: keep the exact ones
    same = [j for j in c.jobs(name=text, limit=_LOOKUP_LIMIT) if j["name"] == text]
    if not same:
        raise NotFound(f"no job is named {text!r} (`rota queue --all` lists jobs and "
                       "their ids)")
    if len(same) == 1:
        return int(same[0]["id"])
    active = [j for j in same if j["state"] in ACTIVE]
    if len(active) == 1:
        return int(active[0]["id"])
    shown = active or same
    ids = ", ".join(f"{j['id']} ({j['state']})" for j in sorted(shown, key=_id))
    raise InvalidSpec(f"{len(shown)} jobs are named {text!r}: {ids}; give the id instead",
                      field="job")


def picked(c: Client, ref: str | int) -> tuple[list[int], list[JobAnswer]]:
    """The ids of the jobs ``ref`` names where several may be meant, and the jobs picked
    by a sweep's base name (empty when ``ref`` is an id or a job's name, which win). A
    name that is neither fails as ``resolve`` does."""
    try:
        return [resolve(c, ref)], []
    except NotFound:
        members = sweep_members(c, str(ref).strip())
        if not members:
            raise  # "no job is named ...", as for any command given one job
        return [_id(j) for j in members], members


def sweep_members(c: Client, base: str) -> list[JobAnswer]:
    """The active jobs of the sweep ``base`` names, in id order: those shown as
    ``BASE[...]`` (a sweep names each job by its base name and its values)."""
    prefix = f"{base}["
    # the filter matches names that contain the text: keep those that start with it
    jobs = c.jobs(states=list(ACTIVE), name=prefix, limit=_LOOKUP_LIMIT * 10)
    return sorted((j for j in jobs if j["name"].startswith(prefix)), key=_id)


def _id(job: JobAnswer) -> int:
    return int(job["id"])


def matching(c: Client, *, user: str | None, name: str | None, states: list[str] | None,
             ) -> list[JobAnswer]:
    """Active jobs that match every filter given (``name``: the name as shown, the given
    one else the command, contains it)."""
    wanted = [s for s in (states or ACTIVE)]
    bad = [s for s in wanted if s not in ACTIVE]
    if bad:
        raise InvalidSpec(f"--state {bad[0]}: only jobs that have not ended can be picked "
                          f"({', '.join(ACTIVE)})", field="state")
    jobs = c.jobs(states=wanted, user=user, name=name, limit=_LOOKUP_LIMIT * 10)
    return sorted(jobs, key=_id)
