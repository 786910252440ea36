"""Out-of-memory on the GPU: telling it from a job's log, and how much to ask for next time."""

from __future__ import annotations

import math
import re

#: How much of the end of a failed attempt's log is searched.
TAIL_BYTES = 64 * 1024
#: The next request: this much over the larger of what was asked and the peak seen.
HEADROOM = 1.5
GIB = 1 << 30
MILLI = 1000

# PyTorch, TensorFlow/JAX (XLA), cuBLAS/cuDNN and CUDA's own wording.
_OOM = re.compile(
    r"CUDA out of memory|torch\.(?:cuda\.)?OutOfMemoryError|OutOfMemoryError: CUDA"
    r"|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_(?:ALLOC_FAILED|NOT_ENOUGH_WORKSPACE)"
    r"|RESOURCE_EXHAUSTED:? *Out of memory|out of memory while trying to allocate"
    r"|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY|Failed to allocate .* GPU memory",
    re.IGNORECASE)


def died_of_oom(log_tail: bytes) -> bool:
    """Whether the end of a log shows the GPU ran out of memory."""
    return _OOM.search(log_tail.decode("utf-8", "replace")) is not None


def bigger_request(*, asked: int | None, peak: int, milli: int,
                   gpu_total: int) -> tuple[int, int] | None:
    """(share of a GPU in thousandths, bytes per GPU) for the retry, or None when no GPU
    has that much. The new memory is 1.5 x the larger of what was asked and the peak seen
    (rounded up to a GiB); a shared job's share grows with it, in quarters."""
    base = max(asked or 0, peak)
    if base <= 0:  # nothing known: ask for what the share gave, as a number
        base = gpu_total * min(milli, MILLI) // MILLI
    want = math.ceil(base * HEADROOM / GIB) * GIB
    if gpu_total <= 0 or want > gpu_total:
        return None
    if milli >= MILLI:
        return MILLI, want
    quarters = max(1, math.ceil(want * 4 / gpu_total))
    return min(MILLI, max(milli, quarters * 250)), want
