"""A stop request that every rank of a distributed run agrees on."""

from __future__ import annotations

import atexit
import functools
from datetime import timedelta
from typing import Any

from rota import job

_LEAVE_WAIT_S = 60  # how long a rank waits at exit for its peers to finish too


def stop_requested() -> bool:
    """Whether Rota asked this job to stop, agreed across ranks.

    Outside ``torch.distributed`` (or without torch) it is ``rota.job.should_stop()``.
    Inside, every rank must call it at the same point of each step: one ``all_reduce``
    (MAX) of the local answer, so all ranks return True together.
    """
    local = job.should_stop()
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return local
    if not (dist.is_available() and dist.is_initialized()):
        return local
    _leave_at_exit()
    on_gpu = dist.get_backend() == "nccl"  # NCCL reduces CUDA tensors only
    flag = torch.tensor([1 if local else 0],
                        device=torch.device("cuda", torch.cuda.current_device())
                        if on_gpu else "cpu")
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def leave_process_group() -> None:
    """Destroy the ``torch.distributed`` process group, if this process is in one.

    A gloo (or NCCL) group left to the interpreter's exit-time destruction can abort a rank
    whose work is done ("terminate called without an active exception", SIGABRT): the run
    saved and stopped, and its attempt is recorded as failed all the same."""
    try:
        import torch.distributed as dist
    except ImportError:
        return
    if not (dist.is_available() and dist.is_initialized()):
        return
    _wait_for_every_rank(dist)
    dist.destroy_process_group()


def _wait_for_every_rank(dist: Any) -> None:
    """Leave together: a rank that tears its gloo pairs down while a slower peer is still
    saving makes that peer's gloo thread abort (seen under load: rank 1 SIGABRT after rank
    0 left). Bounded, so that a rank whose peer died still exits."""
    try:
        if dist.get_backend() == "gloo":
            dist.monitored_barrier(timeout=timedelta(seconds=_LEAVE_WAIT_S))
        else:
            dist.barrier()
    except RuntimeError:
        pass  # a peer is gone: nobody is left to wait for


@functools.cache
def _leave_at_exit() -> None:
    """Leave the group at exit (before the interpreter's teardown), registered once: a
    rank that asked ``stop_requested`` is in a group Rota's stop may end early."""
    atexit.register(leave_process_group)
