"""One job of a jobs file as written, and what is wrong with one: what the file formats
(``rota.jobsfile``: lines and YAML; ``rota.jobsfile_json``) all make.

Invariant 7: every line or item stands alone; a bad one becomes a :class:`JobsFileError`
with its line number and the others still count.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import yaml

from rota.errors import InvalidSpec
from rota.units import parse_memory_person
from rota.words import split_words

TYPE_CHECKING = False  # typing's, without importing typing (`rota submit -f` starts faster)
if TYPE_CHECKING:
    from typing import Any

    from rota.core.spec import JobSpec

#: a line (or a YAML command string) at most as long as one argument may be (Linux's
#: MAX_ARG_STRLEN): checked before anything else, so a huge line costs one len()
LINE_MAX = 128 * 1024


@dataclass(frozen=True, slots=True)
class JobsFileEntry:
    """One job read from the file; ``key`` (the spec's content hash) de-duplicates it."""

    line: int
    spec: JobSpec
    key: str


@dataclass(frozen=True, slots=True)
class JobsFileError:
    """One line or item that could not be read. ``line`` 0 means the whole file.

    ``message`` says what is wrong without the place; ``str()`` gives ``source:line: message``.
    """

    line: int
    message: str
    source: str = ""

    def __str__(self) -> str:
        if not self.line:
            where = self.source
        else:
            where = f"{self.source}:{self.line}" if self.source else f"line {self.line}"
        return f"{where}: {self.message}" if where else self.message


@dataclass(frozen=True, slots=True)
class JobsFileItem:
    """One job as written in the file, its spec not yet checked: `rota submit -f` leaves
    that to the daemon (no spec model to import), the watcher checks it here."""

    line: int
    data: dict[str, Any]
    #: "job N" of a YAML item (0: a line of the line format)
    number: int = 0
    #: the item's YAML node: an error about a field points at that field's line
    node: yaml.Node | None = field(default=None, compare=False, repr=False)

    def check(self) -> JobsFileEntry | JobsFileError:
        """The checked job, or what is wrong with it (as :func:`parse_jobs_text` words it)."""
        from rota.core.spec import parse_spec

        try:
            spec = parse_spec(self.data)
        except InvalidSpec as e:
            return self.error(e)
        return JobsFileEntry(self.line, spec, spec.content_hash())

    def error(self, e: InvalidSpec, source: str = "") -> JobsFileError:
        """``e`` about this job, on the line of the field it names (YAML) or its own."""
        if not self.number:
            return JobsFileError(self.line, str(e), source)
        fline = _field_line(self.node, e.field) or self.line
        at = f"job {self.number}" + (f" (from line {self.line})" if fline != self.line else "")
        return JobsFileError(fline, f"{at}: {e}", source)


def too_long(what: str, size: int) -> str:
    return (f"{what} has {size:,} characters; at most {LINE_MAX:,} (what one argument of a "
            "command may hold): put long inputs in a file the job reads")


def line_of(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def spec_item(line: int, value: Any, number: int, node: yaml.Node | None = None,
              ) -> JobsFileItem | JobsFileError:
    """Job ``number`` of a YAML or JSON file as written (its command string split), or
    what is wrong with it."""
    if not isinstance(value, dict):
        return JobsFileError(line, f"job {number}: expected a mapping of spec fields, "
                                   f"got {type(value).__name__}")
    item = JobsFileItem(line, value, number, node)
    try:
        return replace(item, data=_person_units(_command_from_string(value)))
    except InvalidSpec as e:
        return item.error(e)


def _command_from_string(value: dict[Any, Any]) -> dict[Any, Any]:
    """``command: python train.py`` -> argv by shell-style splitting (no shell is run)."""
    command = value.get("command")
    if not isinstance(command, str):
        return value
    if len(command) > LINE_MAX:
        raise InvalidSpec(f"command: {too_long('the command', len(command))}", field="command")
    if value.get("shell") is True:
        return {**value, "command": [command]}
    try:
        return {**value, "command": split_words(command)}
    except ValueError as e:
        raise InvalidSpec(f"command: cannot split {command!r}: {e}", field="command") from None


def _person_units(value: dict[Any, Any]) -> dict[Any, Any]:
    """``gpu_mem: 20`` written by a person means 20 GiB, as on the command line."""
    if "gpu_mem" not in value:
        return value
    return {**value, "gpu_mem": parse_memory_person(value["gpu_mem"])}


def _field_line(node: yaml.Node | None, field_path: str | None) -> int | None:
    """The line of the key ``field_path`` names (its first part) in an item mapping."""
    if not field_path or not isinstance(node, yaml.MappingNode):
        return None
    first = field_path.split(".")[0]
    for k, _ in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == first:
            return line_of(k)
    return None
