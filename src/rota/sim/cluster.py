"""The simulated cluster: machines (nodes), each with its own list of GPUs.

The simulator gives core every node's GPUs in one list, each GpuView carrying its node, so
core keeps a job of k whole GPUs on one node (rota.sim.engine says how).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

from rota.errors import InvalidSpec
from rota.units import parse_memory

_SPEC = re.compile(r"^\s*(\d+)\s*x\s*([0-9.]+\s*[KMGT]i?B?)\s*$", re.IGNORECASE)
#: GPU memory when a cluster file does not say (openb's node list names models only)
DEFAULT_MEMORY = 80 << 30


@dataclass(frozen=True)
class Node:
    name: str
    memory: tuple[int, ...]  # each GPU's memory in bytes

    @property
    def gpus(self) -> int:
        return len(self.memory)


@dataclass(frozen=True)
class Cluster:
    nodes: tuple[Node, ...]

    @property
    def gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def largest_node(self) -> int:
        return max((n.gpus for n in self.nodes), default=0)

    def describe(self) -> str:
        sizes: dict[int, int] = {}
        for n in self.nodes:
            sizes[n.gpus] = sizes.get(n.gpus, 0) + 1
        parts = [f"{count} node{'s' if count > 1 else ''} x {g} GPUs"
                 for g, count in sorted(sizes.items())]
        return f"{', '.join(parts)} ({self.gpus} GPUs)"


def parse_cluster(gpus: str, nodes: int = 1) -> Cluster:
    """``8x80G`` (GPUs per node, memory each; ``2x24G,1x48G`` mixes) times ``nodes``."""
    if nodes < 1:
        raise InvalidSpec(f"--nodes must be at least 1, not {nodes}", field="nodes")
    memory: list[int] = []
    for part in gpus.split(","):
        m = _SPEC.match(part)
        if m is None:
            raise InvalidSpec(f"--gpus {gpus!r}: write GPUs per node as COUNTxMEMORY, "
                              "e.g. 8x80G or 2x24G,1x48G", field="gpus")
        count = int(m.group(1))
        if count < 1:
            raise InvalidSpec(f"--gpus {gpus!r}: a node needs at least one GPU", field="gpus")
        memory += [parse_memory(m.group(2), field="gpus")] * count
    node = tuple(memory)
    return Cluster(tuple(Node(f"node{i}", node) for i in range(nodes)))


def load_cluster(path: Path, memory: int = DEFAULT_MEMORY) -> Cluster:
    """A trace's own cluster file: Tiresias ``n32g4.csv`` (switches x nodes x GPUs) or
    openb's ``openb_node_list_gpu_node.csv`` (one row per node; nodes without GPUs left
    out). Neither gives GPU memory: every GPU gets ``memory``."""
    try:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise InvalidSpec(f"cannot read cluster file {path}: {e.strerror}",
                          field="cluster") from e
    if rows and "num_gpu_p_node" in rows[0]:
        r = rows[0]
        try:
            count = int(r["num_switch"]) * int(r["num_node_p_switch"])
            per = int(r["num_gpu_p_node"])
        except (KeyError, ValueError) as e:
            raise InvalidSpec(f"{path}: not a Tiresias cluster file ({e})",
                              field="cluster") from e
        return Cluster(tuple(Node(f"n{i}", (memory,) * per) for i in range(count)))
    if rows and "gpu" in rows[0] and "sn" in rows[0]:
        nodes = []
        for line, r in enumerate(rows, start=2):
            try:
                g = int(r["gpu"])
            except ValueError as e:
                raise InvalidSpec(f"{path} line {line}: gpu {r['gpu']!r} is not a number",
                                  field="cluster") from e
            if g > 0:
                nodes.append(Node(r["sn"], (memory,) * g))
        return Cluster(tuple(nodes))
    raise InvalidSpec(f"{path}: not a cluster file Rota knows (Tiresias n32g4.csv or openb "
                      "node list)", field="cluster")
