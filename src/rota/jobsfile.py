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

import yaml

from rota import yaml_bounds
from rota.errors import InvalidSpec
from rota.jobsfile_items import (
    LINE_MAX,
    JobsFileEntry,
    JobsFileError,
    JobsFileItem,
    line_of,
    spec_item,
    too_long,
)
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
        items, errors = _read_yaml(text) if fmt == "yaml" else _read_lines(text)
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


# --- YAML --------------------------------------------------------------------------------

#: libyaml's parser when PyYAML has it (reading a 2,000-job file: 0.71 s -> 0.28 s), with
#: the same nodes and line marks
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read_yaml(text: str) -> _Read:
    items: list[JobsFileItem] = []
    errors: list[JobsFileError] = []
    loader = _SafeLoader(text)
    aliases = "*" in text  # no alias, nothing to expand: a plain file is not walked twice
    number = 0  # jobs counted across documents, for "job N" in messages
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                break
            nodes = _yaml_items(node, errors)
            bad = _duplicate_keys(nodes, number, errors)
            if aliases and not _expansion_ok(node, nodes, number, bad, errors):
                number += len(nodes)
                continue
            data = _construct(loader, node, nodes, number, bad, errors)
            if data is _REFUSED:
                number += len(nodes)
                continue
            for node_item, value in zip(nodes, _yaml_values(data), strict=False):
                number += 1
                if node_item not in bad:
                    read = _yaml_item(node_item, value, number)
                    if isinstance(read, JobsFileItem):
                        items.append(read)
                    else:
                        errors.append(read)
    except yaml.MarkedYAMLError as e:
        errors.append(_yaml_syntax_error(e, text))
    except yaml.YAMLError as e:
        errors.append(JobsFileError(0, f"YAML: {e}"))
    finally:
        loader.dispose()
    return items, errors


_REFUSED = object()  # a document none of whose items could be built


def _expansion_ok(doc: yaml.Node, nodes: list[yaml.Node], number: int, bad: list[yaml.Node],
                  errors: list[JobsFileError]) -> bool:
    """Refuse the items whose aliases expand too far (or into themselves), and blank them
    out of the document; False when the document as a whole still expands too far."""
    counter = yaml_bounds.NodeCounter()
    for n, item in enumerate(nodes, start=number + 1):
        try:
            size = counter.size(item)
        except yaml_bounds.AliasLoop as e:
            errors.append(JobsFileError(line_of(e.node), f"job {n}: {e}"))
        else:
            if size <= yaml_bounds.ITEM_NODES_MAX:
                continue
            errors.append(JobsFileError(line_of(item),
                                        f"job {n}: {yaml_bounds.expansion_problem(size)}"))
        bad.append(item)
        _blank(doc, item)
    if doc in bad:
        return False
    try:
        total = counter.size(doc)
    except yaml_bounds.AliasLoop as e:
        errors.append(JobsFileError(line_of(e.node), str(e)))
        return False
    added = total - counter.distinct
    if added > yaml_bounds.ALIAS_ADDED_MAX:
        errors.append(JobsFileError(line_of(doc), yaml_bounds.document_problem(added)))
        return False
    return True


def _construct(loader: Any, doc: yaml.Node, nodes: list[yaml.Node], number: int,
               bad: list[yaml.Node], errors: list[JobsFileError]) -> Any:
    """The document's data; an item holding a number Python will not convert (over 4,300
    digits) is refused on that number's line, and the others are built."""
    for _ in range(2):
        if doc in bad:
            return _REFUSED
        try:
            return loader.construct_document(doc)
        except ValueError as e:  # int() past its limit, a date like 2024-13-45
            why = str(e)
            loader.constructed_objects, loader.recursive_objects = {}, {}
            loader.state_generators = []
        culprits = [(n, item, long_int) for n, item in enumerate(nodes, start=number + 1)
                    if item not in bad and (long_int := yaml_bounds.long_int(item))]
        if not culprits:
            break
        for n, item, long_int in culprits:
            errors.append(JobsFileError(line_of(long_int),
                                        f"job {n}: {yaml_bounds.long_int_problem(long_int)}"))
            bad.append(item)
            _blank(doc, item)
    where = yaml_bounds.long_int(doc)
    line = line_of(where) if where is not None else line_of(doc)
    problem = (yaml_bounds.long_int_problem(where) if where is not None
               else f"YAML: cannot read a value: {why}")
    errors.append(JobsFileError(line, problem))
    return _REFUSED


def _blank(doc: yaml.Node, item: yaml.Node) -> None:
    """Put null in place of ``item`` in the document's list of jobs (it is not built)."""
    jobs = _jobs_list(doc)
    if jobs is not None:
        jobs.value = [yaml.ScalarNode("tag:yaml.org,2002:null", "") if n is item else n
                      for n in jobs.value]


def _jobs_list(doc: yaml.Node) -> yaml.SequenceNode | None:
    if isinstance(doc, yaml.SequenceNode):
        return doc
    if isinstance(doc, yaml.MappingNode):
        for k, v in doc.value:
            if isinstance(k, yaml.ScalarNode) and k.value == "jobs" and isinstance(
                    v, yaml.SequenceNode):
                return v
    return None


def _yaml_syntax_error(e: yaml.MarkedYAMLError, text: str) -> JobsFileError:
    """Point at the problem, or where the unclosed thing began when the problem is the end."""
    mark = e.problem_mark
    if mark is None or (mark.index >= len(text.rstrip()) and e.context_mark is not None):
        mark = e.context_mark
    line = mark.line + 1 if mark is not None else 0
    what = ": ".join(x for x in (e.context, e.problem) if x)
    return JobsFileError(line, f"YAML: {what}")


def _yaml_items(node: yaml.Node, errors: list[JobsFileError]) -> list[yaml.Node]:
    """The nodes of the job items in one document (in the order of the constructed data)."""
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        keys = {k.value: (k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode)}
        if "jobs" not in keys:
            return [node]
        others = [k for k in keys if k != "jobs"]
        if others:
            line = line_of(keys[others[0]][0])
            errors.append(JobsFileError(line, f"unknown top-level key(s) {others} next to "
                                              "'jobs'"))
        jobs = keys["jobs"][1]
        if isinstance(jobs, yaml.SequenceNode):
            return list(jobs.value)
        if isinstance(jobs, yaml.ScalarNode) and jobs.value in ("", "~", "null"):
            return []
        line = line_of(jobs)
        errors.append(JobsFileError(line, "'jobs' must be a list of specs"))
        return []
    if isinstance(node, yaml.ScalarNode) and node.value in ("", "~", "null"):
        return []
    line = line_of(node)
    errors.append(JobsFileError(line, "expected a job spec mapping, a list of them, or "
                                      "jobs: [...]"))
    return []


def _yaml_values(data: Any) -> list[Any]:
    """The constructed items, shaped like ``_yaml_items``'s nodes."""
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        if "jobs" not in data:
            return [data]
        jobs = data["jobs"]
        return jobs if isinstance(jobs, list) else []
    return []


def _duplicate_keys(items: list[yaml.Node], first: int,
                    errors: list[JobsFileError]) -> list[yaml.Node]:
    """Items with a key given twice (PyYAML would silently keep the last); checked before
    ``<<`` merges are applied, since a merge may legitimately repeat a key."""
    bad: list[yaml.Node] = []
    for number, item in enumerate(items, start=first + 1):
        if not isinstance(item, yaml.MappingNode):
            continue
        seen: set[str] = set()
        for k, _ in item.value:
            if isinstance(k, yaml.ScalarNode) and k.value != "<<":
                if k.value in seen:
                    line = line_of(k)
                    errors.append(JobsFileError(line, f"job {number}: key {k.value!r} "
                                                      "appears twice"))
                    bad.append(item)
                seen.add(k.value)
    return bad


def _yaml_item(node: yaml.Node, value: Any, number: int) -> JobsFileItem | JobsFileError:
    return spec_item(line_of(node), value, number, node)


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
