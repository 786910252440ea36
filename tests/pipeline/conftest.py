"""A real S3-protocol server for the pipeline tests: moto's, in a thread, on a free port
(its buckets live in this process: a test names its own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def s3_url() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()

