"""A stop request that every rank of a distributed run agrees on."""

from __future__ import annotations

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
    on_gpu = dist.get_backend() == "nccl"  # NCCL reduces CUDA tensors only
    flag = torch.tensor([1 if local else 0],
                        device=torch.device("cuda", torch.cuda.current_device())
                        if on_gpu else "cpu")
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())
