"""Telling a GPU out-of-memory death from a log, the bigger request, and sizing warnings."""

from __future__ import annotations

import pytest

from rota.ml.oom import bigger_request, died_of_oom
from rota.server.intake import sizing_warning

GIB = 1 << 30


@pytest.mark.parametrize("tail", [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 23.64 GiB of which 1.2 GiB is free.",
    "torch.cuda.OutOfMemoryError: CUDA out of memory.",
    "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    "tensorflow.python.framework.errors_impl.ResourceExhaustedError: ... RESOURCE_EXHAUSTED: "
    "Out of memory while trying to allocate 4294967296 bytes.",
    "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
    "allocate 17179869184 bytes.",
])
def test_out_of_memory_is_recognised(tail: str) -> None:
    assert died_of_oom(("step 10 loss 1.2\n" * 50 + tail + "\n").encode())


@pytest.mark.parametrize("tail", [
    "MemoryError", "Killed", "freeing memory of the dataloader", "loss: nan",
    "ValueError: out of range", "", "host memory is low; out of disk space",
])
def test_other_failures_are_not_out_of_memory(tail: str) -> None:
    assert not died_of_oom(tail.encode())


def test_the_bigger_request() -> None:
    # a shared job: 1.5 x the larger of asked and peak, its share grows in quarters
    assert bigger_request(asked=4 * GIB, peak=int(3.6 * GIB), milli=250,
                          gpu_total=24 * GIB) == (250, 6 * GIB)
    assert bigger_request(asked=None, peak=10 * GIB, milli=250,
                          gpu_total=24 * GIB) == (750, 15 * GIB)
    # nothing known: what its share of the GPU gave
    assert bigger_request(asked=None, peak=0, milli=500, gpu_total=24 * GIB) == (750, 18 * GIB)
    # whole GPUs keep their count; the memory must fit on one
    assert bigger_request(asked=10 * GIB, peak=0, milli=1000, gpu_total=24 * GIB) == \
        (1000, 15 * GIB)
    assert bigger_request(asked=20 * GIB, peak=0, milli=1000, gpu_total=24 * GIB) is None
    assert bigger_request(asked=1 * GIB, peak=0, milli=250, gpu_total=0) is None


def test_sizing_warnings() -> None:
    kw = {"gpu_total": 24 * GIB, "last_job": 7, "peak": 5 * GIB}
    far = sizing_warning(9, "ft", gpus=1, gpu_mem=None, **kw)
    assert far is not None and "job 7, the last 'ft', peaked at 5" in far and "--gpu-mem 8" in far
    low = sizing_warning(9, "ft", gpus=0.25, gpu_mem=3 * GIB, **kw)
    assert low is not None and "may run out of memory" in low
    assert sizing_warning(9, "ft", gpus=0.5, gpu_mem=8 * GIB, **kw) is None
    assert sizing_warning(9, "ft", gpus=0, gpu_mem=None, **kw) is None
