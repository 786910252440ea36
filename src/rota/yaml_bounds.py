"""What a YAML document may cost once read: aliases that expand too far, numbers Python
will not convert.

A YAML alias (``*a``) stands for the whole node its anchor (``&a``) names. PyYAML builds
that node once and shares it, but everything that walks the result afterwards (JSON for the
request, the spec model, a merge ``<<: [*a, *a]`` while it is built) sees every copy: the
346-byte "billion laughs" file hung ``rota submit -f``. So the composed nodes are counted as
they would be expanded, each distinct node once (linear in the file), before anything is
built. A node that contains an alias to itself (``&a [*a]``) is refused too: it can never
be sent as JSON.
"""

from __future__ import annotations

import sys

import yaml

#: nodes that aliases may add to one document, and nodes one job spec may hold once its
#: aliases are expanded (a 2,000-job file with a shared ``<<: *defaults`` adds ~50,000)
ALIAS_ADDED_MAX = 1_000_000
ITEM_NODES_MAX = 100_000
#: Python refuses int() of a longer decimal string (sys.get_int_max_str_digits())
INT_DIGITS_MAX = getattr(sys, "get_int_max_str_digits", lambda: 4300)() or 10**9
_INT_TAG = "tag:yaml.org,2002:int"


class AliasLoop(ValueError):
    """A node holds an alias to itself (or to a node that holds it)."""

    def __init__(self, node: yaml.Node) -> None:
        super().__init__("an alias refers to a node that contains it (a recursive structure "
                         "cannot be a job spec)")
        self.node = node


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


class NodeCounter:
    """Expanded sizes of nodes, each distinct node visited once (a node shared by aliases
    is counted once per use in its parents' sizes, without being walked again)."""

    def __init__(self) -> None:
        self._size: dict[int, int] = {}
        self._keep: list[yaml.Node] = []  # ids stay valid while the nodes are alive

    @property
    def distinct(self) -> int:
        return len(self._size)

    def size(self, root: yaml.Node) -> int:
        """The number of nodes ``root`` stands for once every alias is expanded.

        Raises :class:`AliasLoop` for a recursive node. Iterative: a deeply nested file
        does not hit Python's recursion limit here.
        """
        sizes = self._size
        path: set[int] = set()  # the nodes being counted: the ancestors of the current one
        stack: list[tuple[yaml.Node, bool]] = [(root, False)]
        while stack:
            node, done = stack.pop()
            key = id(node)
            if done:
                path.discard(key)
                sizes[key] = 1 + sum(sizes[id(c)] for c in _children(node))
                continue
            if key in sizes:
                continue
            if key in path:
                raise AliasLoop(node)
            path.add(key)
            self._keep.append(node)
            stack.append((node, True))
            for child in _children(node):
                if id(child) in path:
                    raise AliasLoop(child)
                if id(child) not in sizes:
                    stack.append((child, False))
        return sizes[id(root)]


def expansion_problem(size: int) -> str:
    return (f"YAML aliases expand this to {_count(size)} nodes; at most {ITEM_NODES_MAX:,} "
            "for one job (is it a 'billion laughs' file?)")


def document_problem(added: int) -> str:
    return (f"YAML aliases add {_count(added)} nodes to this document; at most "
            f"{ALIAS_ADDED_MAX:,} (is it a 'billion laughs' file?)")


def _count(n: int) -> str:
    return f"{n:,}" if n < 10**15 else f"about 10^{len(str(n)) - 1}"


def long_int(node: yaml.Node) -> yaml.ScalarNode | None:
    """The first integer in ``node`` too long for Python to convert, if any."""
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if (isinstance(n, yaml.ScalarNode) and n.tag == _INT_TAG
                and len(n.value) > INT_DIGITS_MAX):
            return n
        stack.extend(_children(n))
    return None


def long_int_problem(node: yaml.ScalarNode) -> str:
    return (f"a number of {len(node.value):,} digits; Python reads at most "
            f"{INT_DIGITS_MAX:,} (quote it to make it a string)")
