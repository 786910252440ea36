"""Reading a captured console log the way the daemon reads a job's log."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rota.ml.parse import LineParser
from rota.server.tracking.outputs import OutputReader, Progress, events_path

FIXTURES = Path(__file__).parent / "fixtures"
_HEADER_END = b"# ----\n"


@dataclass
class Read:
    """What the daemon made of a log: each metric's (step, value) samples, in order, and
    the job's progress at the end."""

    series: dict[str, list[tuple[int | None, float]]] = field(default_factory=dict)
    progress: Progress = field(default_factory=lambda: Progress(attempt=1))

    def values(self, name: str) -> list[float]:
        return [v for _, v in self.series.get(name, [])]


def fixture(name: str) -> bytes:
    """A captured log without its header (which says how it was made)."""
    data = (FIXTURES / name).read_bytes()
    return data[data.index(_HEADER_END) + len(_HEADER_END):]


def read_log(data: bytes, where: Path, *, pieces: int = 7) -> Read:
    """Feed ``data`` to an OutputReader in a few pieces, as a log grows between reads,
    then once more as the job has ended. Pieces end at a line break: a program writes a
    line or a bar's redraw in one go."""
    log = where / "read.log"
    log.write_bytes(b"")
    reader = OutputReader(job_id=1, log_path=log, events_path=events_path(where / "1-1.json"),
                          parser=LineParser(), progress=Progress(attempt=1))
    out = Read(progress=reader.progress)
    at, i = 0, 0
    while at < len(data):
        end = at + max(1, len(data) // pieces)
        while end < len(data) and data[end - 1:end] not in (b"\n", b"\r"):
            end += 1
        with open(log, "ab") as f:
            f.write(data[at:end])
        reader.read(float(i))
        _drain(reader, out)
        at, i = end, i + 1
    reader.read(float(pieces + 1), final=True)
    _drain(reader, out)
    return out


def _drain(reader: OutputReader, out: Read) -> None:
    for row in reader.drain():
        out.series.setdefault(row["name"], []).append((row["step"], row["value"]))
