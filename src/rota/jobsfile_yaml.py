"""A YAML jobs file (``.yaml``/``.yml``): one spec mapping, a list of them, or
``{jobs: [...]}``, read with PyYAML's safe loader (libyaml's where PyYAML has it) under the
bounds of ``rota.yaml_bounds``; each item stands alone (Invariant 7): a bad one is an error
on its line and the others still count."""

from __future__ import annotations

import yaml

from rota import yaml_bounds
from rota.jobsfile_items import JobsFileError, JobsFileItem, line_of, spec_item

TYPE_CHECKING = False  # typing's, without importing typing (`rota submit -f` starts faster)
if TYPE_CHECKING:
    from typing import Any

#: libyaml's parser when PyYAML has it (reading a 2,000-job file: 0.71 s -> 0.28 s), with
#: the same nodes and line marks
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(text: str) -> tuple[list[JobsFileItem], list[JobsFileError]]:
    """Every job of a YAML jobs file as written, and what could not be read as a job."""
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
