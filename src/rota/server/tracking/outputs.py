"""What running jobs write, read as it comes: metrics and progress from their log (no change
to the job's code) and what ``rota.job`` reports in the attempt's events file.

One ``OutputReader`` per running attempt remembers where reading got to in both files, so
the daemon reads only what is new on each tick, and a restarted daemon goes on from the
offsets stored with the job's progress. Lines are split on ``\\n`` and ``\\r`` (progress
bars redraw themselves with ``\\r``); see ``rota.ml.parse`` for the formats.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rota.ml import tfevents, wandb_bridge
from rota.ml.parse import LineParser
from rota.ml.reading import Reading
from rota.server.tracking.logstream import read_range
from rota.storage.owner_files import OwnerFiles

#: How often the daemon reads running jobs' output.
#: how the lines Rota itself writes into a job's log begin (an attempt's header, an OOM
#: note): not the job's output
ROTA_LINE = b"=== rota: "
READ_EVERY_S = 2.0
#: How soon it reads again while some output is left unread (a read stopped at its parsing
#: budget): each read holds the loop no longer, and a job printing fast is not left behind.
CATCH_UP_S = 0.05
#: Bytes read per file per tick: a job that floods its log is caught up over a few ticks.
MAX_READ = 1 << 20
#: Samples kept per metric per tick: a loss printed at every step is thinned evenly
#: (the last one always kept), so a fast loop cannot flood the database.
MAX_PER_TICK = 100
#: the names a training loss goes by, the first found in a reading being a job's loss (the
#: queue's progress shows it beside the step)
TRAIN_LOSS = ("loss", "train/loss", "train_loss", "training_loss")
#: (metric, step) pairs remembered per attempt to count a step reported by the log and by
#: TensorBoard once
SEEN_STEPS = 20_000
#: A line longer than this is cut (the parser looks at the start only).
MAX_LINE = 10_000
#: Bytes of an unfinished line kept between reads: past it the line's start is kept for
#: parsing and the rest is skipped (the log file itself keeps everything), so a job that
#: writes 50 MB without a newline costs the daemon no more than this.
MAX_PARTIAL = 64 << 10
#: Seconds of parsing per read of all running jobs' output, on the daemon's loop: past
#: them the rest waits for the next read (at most one more line's parse runs over it).
PARSE_BUDGET_S = 0.02
#: Bytes of a line past MAX_PARTIAL looked through per read for its end (a search for a
#: line break, no parsing): a 50 MB line is passed over in a few reads.
MAX_SKIP = 16 << 20
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")


def events_path(status_path: Path) -> Path:
    """Where ``rota.job`` in the attempt writes: next to the attempt's status file."""
    return status_path.with_suffix(".events")


def stop_file(status_path: Path) -> Path:
    """Created when Rota asks the attempt to stop (``ROTA_STOP_FILE``, for rota.job)."""
    return status_path.with_suffix(".stop")


@dataclass
class Progress:
    """How far an attempt has got: what the job said last, and the rate Rota measured."""

    attempt: int
    step: int | None = None
    total_steps: int | None = None
    epoch: float | None = None
    total_epochs: int | None = None
    rate: float | None = None  # steps per second
    eta_s: float | None = None
    updated_at: float | None = None
    checkpoint: dict[str, Any] | None = None  # the last one rota.job reported
    loss: float | None = None  # the training loss it printed last (TRAIN_LOSS's first name)
    links: dict[str, Any] = field(default_factory=dict)  # e.g. the W&B run's, from the log
    log_offset: int = 0
    events_offset: int = 0
    tb_offsets: dict[str, int] = field(default_factory=dict)  # TensorBoard event files
    first: tuple[float, int] | None = None  # (time, step) when a step was first seen

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items()
               if k != "first" and v is not None and v != {}}
        frac = self.fraction
        if frac is not None:
            out["fraction"] = frac
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any] | None, attempt: int) -> Progress:
        """The stored progress of this attempt; for a new attempt, a fresh one that keeps
        the checkpoint the previous attempt reported (the next one may resume from it) and
        how far its TensorBoard files were read (they are its, not the new attempt's)."""
        if not d or d.get("attempt") != attempt:  # TensorBoard files read so far stay read
            return cls(attempt=attempt, checkpoint=(d or {}).get("checkpoint"),
                       tb_offsets=dict((d or {}).get("tb_offsets") or {}),
                       links=dict((d or {}).get("links") or {}))
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d and k != "first"}
        return cls(**known)

    @property
    def fraction(self) -> float | None:
        if self.step is not None and self.total_steps:
            return min(1.0, self.step / self.total_steps)
        if self.epoch is not None and self.total_epochs:
            return min(1.0, self.epoch / self.total_epochs)
        return None

    def take(self, r: Reading, now: float) -> None:
        if r.step is not None:
            self.step = r.step
            if self.first is None or r.step < self.first[1]:
                self.first = (now, r.step)
        if r.total_steps is not None:
            self.total_steps = r.total_steps
        if r.epoch is not None:
            self.epoch = r.epoch
        if r.total_epochs is not None:
            self.total_epochs = r.total_epochs
        if r.rate is not None:
            self.rate = r.rate
        if r.eta_s is not None:
            self.eta_s = r.eta_s
        elif r.step is not None:
            self._estimate(now)
        loss = next((r.metrics[n] for n in TRAIN_LOSS if n in r.metrics), None)
        if loss is not None:
            self.loss = loss
        self.updated_at = now

    def _estimate(self, now: float) -> None:
        """Rate and time left from the steps seen so far, when the line did not say."""
        if self.first is None or self.step is None:
            return
        t0, s0 = self.first
        if now - t0 >= 1.0 and self.step > s0:
            self.rate = (self.step - s0) / (now - t0)
            if self.total_steps:
                self.eta_s = max(0.0, (self.total_steps - self.step) / self.rate)


@dataclass
class OutputReader:
    """One attempt's log and events file, read from where the last read ended."""

    job_id: int
    log_path: Path
    events_path: Path
    parser: LineParser
    progress: Progress
    partial: bytes = b""  # the log's unfinished last line, its first MAX_PARTIAL bytes
    skipped: int = 0  # bytes of that line past MAX_PARTIAL, not kept
    partial_after_cr: bool = False  # it follows a \r: a progress bar's redraw
    partial_seen: bytes = b""  # that line when it was parsed as it stood
    changed: bool = False  # progress moved since it was last stored
    samples: list[tuple[float, int | None, str, float]] = field(default_factory=list)
    tensorboard_dir: str | None = None  # scalars in its event files are metrics too
    # the job's account's rights, with which its TensorBoard folder (a path it names) is read
    files: OwnerFiles = field(default_factory=lambda: OwnerFiles(None))
    # (name, step) -> where it came from ("tb" or "out": the log and events), so a step that
    # the log and TensorBoard both report is one sample, not two (bounded: SEEN_STEPS)
    seen: dict[tuple[str, int], str] = field(default_factory=dict)
    json_only: bool = False  # metrics only from lines that are a JSON object (log_metrics)
    # an ended attempt's log size at its end: what follows is a later attempt's, not its
    until: int | None = None

    def read(self, now: float, *, final: bool = False, deadline: float | None = None) -> None:
        """Take in what was written since the last call; ``final`` after the job ended.
        Past ``deadline`` (``time.perf_counter()``) no more lines are parsed: the rest is
        read next time. An ended job's events (its reported checkpoint, why it says it
        failed) are read whole, as what comes next is decided on them."""
        self._read_log(now, final, deadline)
        self._read_events(now, None if final else deadline)
        if self.tensorboard_dir and tfevents.available():
            self._read_tensorboard(now)

    def _read_tensorboard(self, now: float) -> None:
        offsets = self.progress.tb_offsets
        found = self.files.run(_tensorboard_scalars, self.tensorboard_dir or "", offsets)
        for scalars in found:
            for tag, step, value in scalars:
                if self._first_from(tag[:100], step, "tb"):
                    self.samples.append((now, step, tag[:100], value))
                    self.changed = True

    def _first_from(self, name: str, step: int | None, source: str) -> bool:
        """Whether a sample is new here: not already given for that step by the other
        source (a script that prints a metric and writes it to TensorBoard too)."""
        if step is None:
            return True
        key = (name, step)
        if self.seen.setdefault(key, source) != source:
            return False
        if len(self.seen) > SEEN_STEPS:  # forget the oldest half: sources agree in time
            for old in list(self.seen)[:SEEN_STEPS // 2]:
                del self.seen[old]
        return True

    def ended(self) -> None:
        """The attempt ended: what its log holds now is all of its output (a retry's
        follows in the same log, and is not this reader's)."""
        try:
            self.until = os.stat(self.log_path).st_size
        except FileNotFoundError:
            self.until = 0

    def caught_up(self) -> bool:
        """Whether everything written to the log (up to ``until``) has been read."""
        at = self.progress.log_offset + len(self.partial) + self.skipped
        if self.until is not None:
            return at >= self.until
        try:
            return at >= os.stat(self.log_path).st_size
        except OSError:
            return True

    def drain(self) -> list[dict[str, Any]]:
        """The samples read since the last drain, as metric rows, thinned per metric."""
        if not self.samples:
            return []
        by_name: dict[str, list[tuple[float, int | None, str, float]]] = {}
        for s in self.samples:
            by_name.setdefault(s[2], []).append(s)
        self.samples = []
        rows = []
        for name, got in by_name.items():
            for ts, step, _, value in _thin(got, MAX_PER_TICK):
                rows.append({"job_id": self.job_id, "attempt": self.progress.attempt, "ts": ts,
                             "step": step, "name": name, "value": value})
        return rows

    # --- the log -----------------------------------------------------------------------
    def _read_log(self, now: float, final: bool, deadline: float | None) -> None:
        start = self.progress.log_offset  # where the unfinished line starts
        at = start + len(self.partial) + self.skipped
        data = self._chunk(at)
        passed = 0
        while len(self.partial) >= MAX_PARTIAL and len(data) == MAX_READ and passed < MAX_SKIP:
            brk = [i for i in (data.find(b"\n"), data.find(b"\r")) if i >= 0]
            if brk:  # the long line ends here: what follows is read as usual
                self.skipped += min(brk)
                at += min(brk)
                data = self._chunk(at)
                break
            self.skipped += len(data)
            at += len(data)
            passed += len(data)
            data = self._chunk(at)
        # the end of an ended job's log is reached: its last line is whole, newline or not
        final = final and (self.until is None or at + len(data) >= self.until)
        if not data and not final:
            return
        cut = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if cut < 0:  # the unfinished line goes on: keep its start only
            room = MAX_PARTIAL - len(self.partial)
            self.partial += data[:max(0, room)]
            self.skipped += len(data) - len(data[:max(0, room)])
        else:
            # (the kept start of a long line and its end make one line to the parser,
            # which reads the first MAX_LINE bytes only)
            text = self.partial + data[:cut]
            pos = 0
            for m in _LINE_BREAK.finditer(text):
                self._whole_line(text[pos:m.start()], now)
                pos = m.end()
                if deadline is not None and time.perf_counter() > deadline:
                    # the rest waits: the next read starts at the next line
                    self._restart_at(at + pos - len(self.partial))
                    return
            self._whole_line(text[pos:], now)
            tail = data[cut + 1:]
            self.partial, self.skipped = tail[:MAX_PARTIAL], max(0, len(tail) - MAX_PARTIAL)
            self.partial_after_cr = data[cut] == ord("\r")
            start = at + cut + 1
        # stored offsets point at the unfinished line, so a restarted daemon reads it again
        self.progress.log_offset = start
        # The text after the last line break is parsed only when it cannot be half a line:
        # a progress bar redrawn after a \r (written whole, flushed, no newline until it
        # finishes), or anything once the job has ended. Block-buffered output is cut at
        # any byte, so a line after a \n waits for its own \n.
        if self.partial and (final or self.partial_after_cr) and self.partial != self.partial_seen:
            self._line(self.partial, now)
            self.partial_seen = self.partial

    def _chunk(self, at: int) -> bytes:
        """The next slice of the log from ``at`` (never past ``until``)."""
        limit = MAX_READ if self.until is None else max(0, min(MAX_READ, self.until - at))
        return read_range(self.log_path, at, limit, uid=self.files.uid) if limit else b""

    def _whole_line(self, line: bytes, now: float) -> None:
        if line and line != self.partial_seen:
            self._line(line, now)
        self.partial_seen = b""

    def _restart_at(self, offset: int) -> None:
        """Parsing stopped for this read: the next one starts at ``offset``, a line's start
        (the text before it has been parsed)."""
        self.progress.log_offset = offset
        self.partial, self.skipped, self.partial_after_cr = b"", 0, False

    def _line(self, raw: bytes, now: float) -> None:
        if raw.startswith(ROTA_LINE):  # Rota's own (an attempt's header): no metrics there
            return
        text = raw[:MAX_LINE].decode("utf-8", "replace")
        link = wandb_bridge.link_in(text)
        if link is not None and self.progress.links.get("wandb", {}).get(link[0]) != link[1]:
            self.progress.links.setdefault("wandb", {})[link[0]] = link[1]
            self.changed = True
        if self.json_only and not _json_object(text):
            return
        reading = self.parser.parse(text)
        if reading is None:
            return
        self._take(reading, now)

    def _take(self, reading: Reading, now: float) -> None:
        self.progress.take(reading, now)
        self.changed = True
        step = reading.step if reading.step is not None else self.progress.step
        for name, value in reading.metrics.items():
            if self._first_from(name[:100], step, "out"):
                self.samples.append((now, step, name[:100], value))

    # --- rota.job's events -------------------------------------------------------------
    def _read_events(self, now: float, deadline: float | None) -> None:
        data = read_range(self.events_path, self.progress.events_offset, MAX_READ,
                          uid=self.files.uid)
        end = data.rfind(b"\n") + 1  # whole lines only: the helper writes one per call
        pos = 0
        while pos < end:
            stop = data.index(b"\n", pos) + 1
            line, pos = data[pos:stop], stop
            self.progress.events_offset += len(line)
            try:
                ev = json.loads(line)
            except ValueError:
                ev = None
            if isinstance(ev, dict):
                self._event(ev, now)
            if deadline is not None and time.perf_counter() > deadline:
                return  # the rest next time

    def _event(self, ev: dict[str, Any], now: float) -> None:
        kind = ev.get("kind")
        step = _int(ev.get("step"))
        if kind == "metrics":
            raw = ev.get("metrics")
            metrics = {str(k)[:100]: float(v) for k, v in (raw or {}).items()
                       if _number(v)} if isinstance(raw, dict) else {}
            self._take(Reading(metrics=metrics, step=step,
                               total_steps=_int(ev.get("total_steps")),
                               epoch=_float(ev.get("epoch")),
                               total_epochs=_int(ev.get("total_epochs"))), now)
        elif kind == "checkpoint" and isinstance(ev.get("path"), str):
            self.progress.checkpoint = {"path": ev["path"], "step": step, "ts": now}
            self.changed = True


def _json_object(text: str) -> bool:
    """Whether the line is one JSON object (``{"arc_easy/acc": 0.5}``), nothing else."""
    s = text.strip()
    if not (s.startswith("{") and s.endswith("}")):
        return False
    try:
        return isinstance(json.loads(s), dict)
    except ValueError:
        return False


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _int(v: object) -> int | None:
    return int(v) if _number(v) else None  # type: ignore[call-overload]


def _float(v: object) -> float | None:
    return float(v) if _number(v) else None  # type: ignore[arg-type]


def _thin(items: list[Any], keep: int) -> Iterable[Any]:
    """At most ``keep`` items spread evenly over the list, the last one always among them."""
    n = len(items)
    if n <= keep:
        return items
    picks = {round(i * (n - 1) / (keep - 1)) for i in range(keep)}
    return [items[i] for i in sorted(picks)]


def _tensorboard_scalars(directory: str, offsets: dict[str, int]
                         ) -> list[list[tuple[str, int, float]]]:
    """The new scalars of each event file under ``directory``, its offset moved on (run
    with the job's account's rights: the folder is one the job names)."""
    found = []
    for path in tfevents.event_files(directory):
        scalars, offsets[path] = tfevents.read_scalars(path, offsets.get(path, 0))
        found.append(scalars)
    return found
