"""The watched jobs file: the original tool's line format, or YAML specs.

Line format (``.txt``/``.csv``), one job a line, ``#`` comments and blank lines skipped::

    priority,script_path,conda_env,arguments,allowed_gpus
    1,train.py,torch,--lr 0.1 --tags "a, b",0-3
    2,eval.sh,,"--tags a,b --split test",4,5,6,7

The first four fields are split on commas. A field that *starts* with a double quote is a
CSV-quoted field (``""`` is a literal quote) and must be quoted whole; in any other field a
``"..."`` pair still protects its commas and is kept for the shell-style split of the
arguments. ``allowed_gpus`` is the rest of the line, so ``4,5,6,7`` needs no quotes. The
original tool broke silently when arguments held a comma; here that line gets an error
naming the field and saying to quote the arguments.

YAML (``.yaml``/``.yml``) or JSON (``.json``, read as JSON: no trailing commas): one spec
mapping, a list of them, or ``{jobs: [...]}``; each
item is a :class:`~rota.core.spec.JobSpec` (``command`` may be one string: it is split like
a shell would, never run through one, unless ``shell: true``). ``gpu_mem`` is GiB unless a
unit is given (``20``, ``20G``, ``512M``), as on the command line.

Invariant 7: every line or item stands alone; a bad one becomes a :class:`JobsFileError`
with its line number and the others still count.
"""

from __future__ import annotations

import os
import re
import shlex
import time
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePath

from rota.errors import InvalidSpec
from rota.jobsfile_items import (
    LINE_MAX,
    JobsFileEntry,
    JobsFileError,
    JobsFileItem,
    too_long,
)
from rota.jobsfile_yaml import read_yaml
from rota.units import format_gpu_set, parse_gpu_set
from rota.words import split_words

TYPE_CHECKING = False  # typing's, without importing typing (`rota submit -f` starts faster)
if TYPE_CHECKING:
    from typing import Any, Literal

if TYPE_CHECKING:
    pass

if TYPE_CHECKING:
    JobsFormat = Literal["csv", "yaml", "json"]
else:
    JobsFormat = str  # annotations alone use it

_FIELDS = ("priority", "script_path", "conda_env", "arguments")
_COMMA_HINT = "if the arguments contain commas, put them in double quotes"
_NAME_MAX = 200  # JobSpec.name's limit
_PRIORITY = re.compile(r"[+-]?[0-9]{1,18}")
_DIGITS = re.compile(r"[+-]?[0-9]+")
_GPU_LIST_CHARS = re.compile(r"[0-9,\- ]*")


@dataclass(frozen=True, slots=True)
class JobsFileParse:
    """Everything read from one version of the file: good jobs and bad lines, by line."""

    entries: list[JobsFileEntry] = field(default_factory=list)
    errors: list[JobsFileError] = field(default_factory=list)


def fmt_for_path(path: str | os.PathLike[str]) -> JobsFormat:
    """``.yaml``/``.yml`` -> yaml; ``.json`` -> json; anything else (``.txt``, ``.csv``, no
    suffix) -> csv."""
    suffix = PurePath(path).suffix.lower()
    if suffix == ".json":
        return "json"
    return "yaml" if suffix in (".yaml", ".yml") else "csv"


def parse_jobs_text(text: str, *, fmt: JobsFormat, source: str) -> JobsFileParse:
    """Read and check every job in ``text``; ``source`` (usually the path) is stamped on
    the errors."""
    items, errors = read_jobs_text(text, fmt=fmt, source=source)
    out = JobsFileParse(errors=errors)
    for item in items:
        checked = item.check()
        if isinstance(checked, JobsFileEntry):
            out.entries.append(checked)
        else:
            out.errors.append(checked)
    return _with_source(out, source)


def read_jobs_text(text: str, *, fmt: JobsFormat, source: str,
                   ) -> tuple[list[JobsFileItem], list[JobsFileError]]:
    """Every job in ``text`` as written, unchecked, and what could not be read as a job at
    all (by line, ``source`` stamped on them)."""
    text = text.removeprefix("\ufeff")  # a byte order mark some editors write first
    if fmt == "json":
        from rota.jobsfile_json import read_json

        items, errors = read_json(text)
    else:
        items, errors = read_yaml(text) if fmt == "yaml" else _read_lines(text)
    return items, _with_source(JobsFileParse(errors=errors), source).errors


def _with_source(parse: JobsFileParse, source: str) -> JobsFileParse:
    errors = sorted((replace(e, source=source) for e in parse.errors), key=lambda e: e.line)
    return JobsFileParse(parse.entries, errors)


_Read = tuple[list[JobsFileItem], list[JobsFileError]]


# --- line format -------------------------------------------------------------------------

def _read_lines(text: str) -> _Read:
    items: list[JobsFileItem] = []
    errors: list[JobsFileError] = []
    # Split on "\n" only: str.splitlines() would also break on characters such as U+2028
    # that may legitimately sit inside an argument.
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")
        if len(line) > LINE_MAX:
            errors.append(JobsFileError(number, too_long("the line", len(line))))
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            items.append(JobsFileItem(number, _line_to_dict(line)))
        except InvalidSpec as e:
            errors.append(JobsFileError(number, str(e)))
    return items, errors


def _line_to_dict(line: str) -> dict[str, Any]:
    fields = _split_fields(line)
    if len(fields) < 4:
        raise InvalidSpec(f"expected priority,script_path,conda_env,arguments,allowed_gpus; "
                          f"found {len(fields)} field(s)", field="line")
    prio_text, script, conda, args_text = fields[:4]
    rest = fields[4].strip() if len(fields) > 4 else ""
    if not _PRIORITY.fullmatch(prio_text):
        if _DIGITS.fullmatch(prio_text):  # int() of over 4,300 digits raises ValueError
            raise InvalidSpec(f"priority: a number of {len(prio_text):,} digits; priorities "
                              "run from -1000000 to 1000000", field="priority")
        shown = repr(prio_text) if len(prio_text) <= 60 else f"{prio_text[:40]!r}..."
        raise InvalidSpec(f"priority: {shown} is not a whole number", field="priority")
    if not script:
        raise InvalidSpec("script_path is empty", field="script_path")
    try:
        args = split_words(args_text)
    except ValueError as e:
        hint = f"; {_COMMA_HINT}" if rest else ""
        raise InvalidSpec(f"arguments: cannot split {args_text!r}: {e}{hint}",
                          field="arguments") from None
    return {
        "command": _argv(script, args),
        "name": PurePath(script).name[:_NAME_MAX] or None,
        "priority": int(prio_text),
        "conda": conda or None,
        "allowed_gpus": _allowed(rest),
        "llm": _llm_arg(args),
    }


def _argv(script: str, args: list[str]) -> list[str]:
    if script.endswith(".py"):
        return ["python", script, *args]
    if script.endswith(".sh"):
        return ["bash", script, *args]
    return [script, *args]


def _allowed(rest: str) -> list[int] | None:
    if len(rest) >= 2 and rest[0] == rest[-1] == '"':
        rest = rest[1:-1]  # tolerate a quoted GPU list
    try:
        gpus = parse_gpu_set(rest)
    except InvalidSpec:
        if _GPU_LIST_CHARS.fullmatch(rest):
            raise  # a real GPU list with a mistake in it, e.g. a backwards range
        # Most likely arguments that spilled over a comma into the last field.
        raise InvalidSpec(f"allowed_gpus {rest!r} is not a GPU list like 0-3 or 4,5,6,7; "
                          f"{_COMMA_HINT}", field="allowed_gpus") from None
    return sorted(gpus) if gpus is not None else None


def _llm_arg(args: list[str]) -> str | None:
    """The model of ``--llm X`` / ``--llm=X`` among the arguments (the last one wins)."""
    found: str | None = None
    for i, a in enumerate(args):
        if a == "--llm":
            if i + 1 >= len(args) or not args[i + 1].strip():
                raise InvalidSpec("arguments: --llm needs a model name", field="arguments")
            found = args[i + 1]
        elif a.startswith("--llm="):
            found = a.removeprefix("--llm=") or None
            if found is None:
                raise InvalidSpec("arguments: --llm needs a model name", field="arguments")
    return found


def _split_fields(line: str) -> list[str]:
    """Up to four comma-separated fields, then the rest of the line as the fifth."""
    fields: list[str] = []
    pos = 0
    while len(fields) < 4:
        value, pos = _read_field(line, pos, len(fields))
        fields.append(value)
        if pos > len(line):  # the line ended inside this field
            return fields
    fields.append(line[pos:])
    return fields


def _read_field(line: str, pos: int, index: int) -> tuple[str, int]:
    """One field from ``pos``; returns it and the position after its comma (> len at end).

    An unquoted field comes back stripped, a quoted one exactly as quoted.
    """
    start = pos
    while start < len(line) and line[start] in " \t":
        start += 1
    if start < len(line) and line[start] == '"':
        return _read_quoted(line, start, index)
    in_quotes = False
    for i in range(pos, len(line)):
        c = line[i]
        if c == '"':
            in_quotes = not in_quotes
        elif c == "," and not in_quotes:
            return line[pos:i].strip(), i + 1
    if in_quotes:
        raise InvalidSpec(f"{_FIELDS[index]}: a double quote is not closed",
                          field=_FIELDS[index])
    return line[pos:].strip(), len(line) + 1


def _read_quoted(line: str, start: int, index: int) -> tuple[str, int]:
    name = _FIELDS[index]
    chars: list[str] = []
    i = start + 1
    while True:
        if i >= len(line):
            raise InvalidSpec(f"{name}: a double quote is not closed", field=name)
        c = line[i]
        if c == '"' and line[i + 1:i + 2] == '"':
            chars.append('"')
            i += 2
        elif c == '"':
            i += 1
            break
        else:
            chars.append(c)
            i += 1
    after = line[i:].lstrip(" \t")
    if not after:
        return "".join(chars), len(line) + 1
    if after[0] == ",":
        return "".join(chars), len(line) - len(after) + 1
    raise InvalidSpec(f"{name}: text after the closing double quote ({after.split(',')[0]!r}); "
                      'a field that starts with " must be quoted whole, with "" for a '
                      "literal quote", field=name)


def _csv_field(value: str) -> str:
    """Quote a field the way ``_read_field`` reads it back unchanged."""
    if any(c in value for c in ',"') or value != value.strip():
        return '"' + value.replace('"', '""') + '"'
    return value


def format_jobs_line(priority: int, script: str, conda: str | None, arguments: list[str],
                     allowed_gpus: str | None) -> str:
    """One line in the original format (for ``rota add``), checked by reading it back.

    Arguments are joined with :func:`shlex.join` and the field is CSV-quoted when it holds a
    comma or a double quote, so :func:`parse_jobs_text` yields exactly the same job.
    """
    for what, value in (("script_path", script), ("conda_env", conda or ""),
                        *(("arguments", a) for a in arguments)):
        if "\n" in value or "\r" in value:
            raise InvalidSpec(f"{what}: a line break cannot be written to a jobs file line",
                              field=what)
    if not script.strip():
        raise InvalidSpec("script_path is empty", field="script_path")
    gpus = format_gpu_set(parse_gpu_set(allowed_gpus))
    line = ",".join([str(priority), _csv_field(script), _csv_field(conda or ""),
                     _csv_field(shlex.join(arguments)), gpus])
    if len(line) > LINE_MAX:
        raise InvalidSpec(too_long("the line", len(line)), field="line")
    from rota.core.spec import parse_spec

    parse_spec(_line_to_dict(line))  # the same checks a watcher will make; raises if bad
    return line


# --- watching ----------------------------------------------------------------------------

class JobsFileWatcher:
    """Re-reads the jobs file only when its (mtime_ns, size, inode) changes.

    ``poll`` is one ``stat`` when nothing changed, so the daemon may call it on a timer and
    right after ``rota add``. A file changed twice within one timestamp tick with the same
    size would look unchanged ("racy" stat, as git calls it), so a file whose mtime is very
    recent is read again on the next poll too. A new parse is returned only when what was
    read differs from last time (a bare ``touch`` gives None).
    """

    RACY_NS = 2_000_000_000

    def __init__(self, path: str | os.PathLike[str], *, fmt: JobsFormat | None = None) -> None:
        self.path = Path(path)
        self.fmt: JobsFormat = fmt or fmt_for_path(self.path)
        self._stat: tuple[int, int, int] | None = None
        self._racy = False
        # What the last poll found: ("missing", ""), ("error", message) or ("data", bytes).
        self._seen: tuple[str, str | bytes] | None = None

    def poll(self) -> JobsFileParse | None:
        """A fresh parse if the file changed since the last poll, else None.

        A missing file reads as empty (no jobs, no error): the file is optional. An
        unreadable one gives a parse with one error (line 0), reported once.
        """
        try:
            st = os.stat(self.path)
            sig = (st.st_mtime_ns, st.st_size, st.st_ino)
            if self._seen is not None and sig == self._stat and not self._racy:
                return None
            data = self.path.read_bytes()
        except FileNotFoundError:
            self._stat, self._racy = None, False
            return self._report(("missing", ""))
        except OSError as e:
            self._stat, self._racy = None, True
            return self._report(("error", f"cannot read: {e.strerror or e}"))
        self._stat = sig
        self._racy = st.st_mtime_ns >= time.time_ns() - self.RACY_NS
        return self._report(("data", data))

    def _report(self, seen: tuple[str, str | bytes]) -> JobsFileParse | None:
        if seen == self._seen:
            return None
        self._seen = seen
        kind, payload = seen
        if kind == "missing":
            return JobsFileParse()
        if isinstance(payload, str):
            return JobsFileParse(errors=[JobsFileError(0, payload, str(self.path))])
        text = payload.decode("utf-8", errors="replace")
        parse = parse_jobs_text(text, fmt=self.fmt, source=str(self.path))
        return _with_source(_drop_undecodable(parse, payload), str(self.path))


def decode_jobs_file(data: bytes) -> tuple[str, bool]:
    """The file's text, and whether all of it was UTF-8: bytes that are not become U+FFFD,
    so the jobs that hold them can be refused one by one and the others still count."""
    try:
        return data.decode("utf-8"), True
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace"), False


def drop_undecodable_items(items: list[JobsFileItem],
                           ) -> tuple[list[JobsFileItem], list[JobsFileError]]:
    """The items of a file that was not all UTF-8 that hold none of its bad bytes, and an
    error for each of the others (as the watcher words it)."""
    good: list[JobsFileItem] = []
    errors: list[JobsFileError] = []
    for item in items:
        if "\ufffd" in repr(item.data):
            errors.append(JobsFileError(item.line, _NOT_UTF8))
        else:
            good.append(item)
    return good, errors


_NOT_UTF8 = "not valid UTF-8"


def _drop_undecodable(parse: JobsFileParse, data: bytes) -> JobsFileParse:
    """Jobs that hold bytes that are not UTF-8 become errors; the others still count."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:
        return parse
    entries, errors = [], list(parse.errors)
    for entry in parse.entries:
        if "\ufffd" in str(entry.spec.model_dump()):
            errors.append(JobsFileError(entry.line, _NOT_UTF8))
        else:
            entries.append(entry)
    return JobsFileParse(entries, errors)
