"""A job's training progress and how it ended, in words: ``45% step 450/1000, ETA 37s``.

Its own light module (no Typer, no Rich): `rota queue` says it for every running job and
runs on the fast lane (rota.cli.fast); `rota metrics` (rota.cli.ml) says it too.
"""

from __future__ import annotations

from rota.units import format_duration

TYPE_CHECKING = False  # typing's, without importing typing (rota.cli starts faster)

if TYPE_CHECKING:
    from rota.answers import JobAnswer, ProgressAnswer

#: How an ended job's run time is told, by its state.
ENDED_WORDS = {"completed": "completed in", "failed": "failed after",
               "cancelled": "cancelled after", "timeout": "timed out after"}


def ended_text(job: JobAnswer) -> str | None:
    """``completed in 2m13s`` for a job that has ended, None for one that has not."""
    words = ENDED_WORDS.get(job["state"])
    if words is None:
        return None
    start, end = job["started_at"], job["ended_at"]
    if start is None or end is None:
        return words.split()[0]  # ended without running (cancelled while pending)
    return f"{words} {format_duration(max(0.0, end - start))}"


def progress_text(p: ProgressAnswer | None, ended: str | None = None,
                  per_step: bool | None = None) -> str:
    """``45% step 450/1000, 14.8 steps/s, ETA 37s`` from a job's progress; for a job that
    has ended (``ended``: how, from ended_text) no rate or time left, but how it ended.
    ``per_step``: the rate in s/step (True) or steps/s (False), as a listing of several
    jobs chooses once (rate_unit); None: whichever reads best for this one."""
    if ended is not None:
        still: ProgressAnswer | None = {**p, "rate": None, "eta_s": None} if p else None
        return ", ".join(x for x in (progress_text(still), ended) if x)
    if not p:
        return ""
    parts = []
    if (fraction := p.get("fraction")) is not None:
        parts.append(f"{100 * fraction:.0f}%")
    if (step := p.get("step")) is not None:
        parts.append(f"step {step}" + (f"/{p['total_steps']}" if p.get("total_steps") else ""))
    if (epoch := p.get("epoch")) is not None:
        parts.append(f"epoch {epoch:g}"
                     + (f"/{p['total_epochs']}" if p.get("total_epochs") else ""))
    if (loss := p.get("loss")) is not None:
        parts.append(f"loss {loss:.4g}")
    rate = p.get("rate")
    if rate:
        slow = rate < 1 if per_step is None else per_step
        parts.append(f"{1 / rate:.3g} s/step" if slow else f"{rate:.3g} steps/s")
    if (eta := p.get("eta_s")) is not None:
        parts.append(f"ETA {format_duration(eta)}")
    return ", ".join(parts)


def rate_unit(progresses: list[ProgressAnswer | None]) -> bool | None:
    """One unit for a listing's rates (progress_text's ``per_step``): s/step when any job
    takes a second or more a step, else steps/s; None when none has a rate."""
    rates = [r for p in progresses if p and (r := p.get("rate"))]
    return any(r < 1 for r in rates) if rates else None
