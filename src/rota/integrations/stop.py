"""A stop request that every rank of a distributed run agrees on."""

from __future__ import annotations

import atexit
import functools

from rota import job


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
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


@functools.cache
def _leave_at_exit() -> None:
    """Leave the group at exit (before the interpreter's teardown), registered once: a
    rank that asked ``stop_requested`` is in a group Rota's stop may end early."""
    atexit.register(leave_process_group)
