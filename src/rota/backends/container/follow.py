"""One thread per running container: it copies the output into the job's log, then waits
for the container's end, records it in the status file, and only then turns the watch
pipes readable. So when the daemon's watch fd fires, the log is complete and the end is
on disk (a restarted daemon reads the same record)."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rota.backends.container.logs import LogCopy
from rota.backends.container.records import (
    end_fields,
    exit_of_state,
    read_record,
    write_record,
)
from rota.units import format_memory

log = logging.getLogger("rota.backends.container")


class Follower:
    def __init__(self, container: Any, log_path: Path, status_path: str,
                 done: Callable[[Follower], None]) -> None:
        self.container, self.log_path, self.status_path = container, log_path, status_path
        self._done = done
        self._lock = threading.Lock()
        self._pipes: list[int] = []  # write ends, closed when the end is recorded
        self._ended = False
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name=f"rota-container-{container.name}")

    def start(self) -> None:
        self.thread.start()

    def pipe(self) -> int:
        """A read end that turns readable (EOF) once the end is recorded."""
        r, w = os.pipe2(os.O_CLOEXEC)
        with self._lock:
            if self._ended:
                os.close(w)
                return r
            self._pipes.append(w)
        return r

    def _run(self) -> None:
        try:
            self.finish()
        except Exception:  # the pipes close all the same: collect then asks Docker
            log.exception("container %s: following it failed", self.container.name)
        finally:
            with self._lock:
                self._ended = True
                pipes, self._pipes = self._pipes, []
            for w in pipes:
                with contextlib.suppress(OSError):
                    os.close(w)
            self._done(self)

    def finish(self) -> None:
        """Copy the output to its end (the stream ends when the container does), then
        record how it ended."""
        copy = LogCopy(self.log_path, self.status_path)
        copy.run(self.container.logs(stream=True, follow=True, stdout=True, stderr=True))
        self.container.wait()
        # a followed stream may end before Docker has stored the output's last partial line
        # (moby#43860): read the stored entries once more; the cursor skips those copied
        copy.run(self.container.logs(stream=True, follow=False, stdout=True, stderr=True))
        self.container.reload()
        info = exit_of_state(self.container.attrs.get("State") or {})
        record = read_record(self.status_path)
        if record.get("ended_at") is not None:
            return
        if info.oom_killed:  # said where a person reads first (the daemon reads it too)
            limit = (self.container.attrs.get("HostConfig") or {}).get("Memory") or 0
            note = f"=== rota: killed by the kernel's OOM killer: out of memory (memory " \
                   f"limit {format_memory(limit) if limit else 'none'})\n"
            with open(self.log_path, "ab") as f:
                f.write(note.encode())
        write_record(self.status_path, {**record, **end_fields(info)})
