"""The entrypoint of Ray jobs that span several nodes, or that carry secrets.

Runs on the Ray cluster as the job's driver (``python -m rota.backends.ray.gang [options]
-- COMMAND...``), so Rota must be installed in the cluster's Python (a head on this
machine started from Rota's environment has it).

- ``--secrets FILE``: a JSON file of variables (written by the engine, readable by this
  user only); it is read and deleted before the command starts, and its values go into
  the command's environment, never into Ray's job record.
- One node: the command replaces this process (``exec``), in ``--cwd``.
- ``--nodes N`` > 1: a placement group of N bundles (STRICT_SPREAD: one per node, each the
  per-node GPUs/CPUs/memory), one rank actor per bundle, and in each the command with the
  torchrun environment the Kubeflow operator gives (MASTER_ADDR = rank 0's node,
  MASTER_PORT, WORLD_SIZE = NNODES = N, RANK = NODE_RANK, and PET_* for ``torchrun``).
  Every rank's output comes to the job's log, each line prefixed ``[rank R]``. SIGTERM or
  SIGINT (Ray's job stop) is forwarded to every rank's process group, and SIGKILL follows
  after ``--grace`` seconds; a rank that fails makes the others stop the same way (as
  ``srun --kill-on-bad-exit``). The exit code is the failed rank's, else the worst rank's
  (a signal: 128 + it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

_TICK = 0.2  # seconds between two rounds of output and exit reads
_WAIT_NOTE = 30.0  # seconds between two "still waiting for nodes" lines
_PR_SET_PDEATHSIG = 1


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    env = _read_secrets(args.secrets) if args.secrets else {}
    if args.nodes == 1:
        if args.cwd:
            os.chdir(args.cwd)
        os.execvpe(args.command[0], args.command, {**os.environ, **env})
    return Gang(args, env).run()


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m rota.backends.ray.gang")
    p.add_argument("--key", required=True, help="the Rota job's key (names the group)")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--gpus", type=float, default=0.0, help="per node")
    p.add_argument("--cpus", type=float, default=None, help="per node (default 1)")
    p.add_argument("--memory", type=int, default=None, help="bytes per node")
    p.add_argument("--accelerator", default=None, help="GPU type (accelerator_type:X)")
    p.add_argument("--nproc", type=int, default=1, help="torchrun processes per node")
    p.add_argument("--grace", type=float, default=30.0)
    p.add_argument("--cwd", default=None)
    p.add_argument("--secrets", default=None)
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command or args.nodes < 1:
        p.error("a command after '--' and --nodes >= 1 are required")
    return args


def _read_secrets(path: str) -> dict[str, str]:
    """The variables in ``path``; the file is deleted first, whatever follows."""
    try:
        with open(path, encoding="utf-8") as fh:
            os.unlink(path)
            values = json.load(fh)
    except FileNotFoundError:
        sys.exit(f"rota: the secrets file {path} is not on this node (the job's driver "
                 "must run on the machine Rota submits from), or it was read already")
    return {str(k): str(v) for k, v in values.items()}


def bundle(args: argparse.Namespace) -> dict[str, float]:
    """One node's share: what each bundle of the placement group and its rank hold."""
    out: dict[str, float] = {"CPU": args.cpus or 1.0}
    if args.gpus:
        out["GPU"] = args.gpus
    if args.memory:
        out["memory"] = float(args.memory)
    if args.accelerator:
        out[f"accelerator_type:{args.accelerator}"] = 0.001
    return out


def rank_env(rank: int, nodes: int, master: tuple[str, int], nproc: int) -> dict[str, str]:
    """torchrun's environment for one node, as the Kubeflow PyTorchJob operator sets it."""
    addr, port = master[0], str(master[1])
    return {"MASTER_ADDR": addr, "MASTER_PORT": port, "WORLD_SIZE": str(nodes),
            "RANK": str(rank), "NNODES": str(nodes), "NODE_RANK": str(rank),
            "PET_MASTER_ADDR": addr, "PET_MASTER_PORT": port, "PET_NNODES": str(nodes),
            "PET_NODE_RANK": str(rank), "PET_NPROC_PER_NODE": str(nproc)}


def worst(codes: Sequence[int]) -> int:
    """The exit code of a gang: the largest (a signal counts as 128 + it)."""
    return max((128 - c if c < 0 else c) for c in codes) if codes else 0


class Rank:
    """One node's process (a Ray actor): started, read, signalled; never blocks."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self._proc: subprocess.Popen[bytes] | None = None
        self._out = bytearray()
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # Ray's name for this actor in its own logs
        return f"rank{self.rank}"

    def address(self) -> tuple[str, int]:
        """This node's IP and a port that was free on it (the rendezvous, for rank 0)."""
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def start(self, argv: list[str], env: dict[str, str], cwd: str | None) -> int:
        self._proc = subprocess.Popen(
            argv, env={**os.environ, **env}, cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_die_with_parent)
        threading.Thread(target=self._read, daemon=True).start()
        return self._proc.pid

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while chunk := os.read(fd, 65536):
            with self._lock:
                self._out += chunk

    def drain(self) -> bytes:
        with self._lock:
            out, self._out = bytes(self._out), bytearray()
        return out

    def exit_code(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def signal(self, signum: int) -> None:
        """``signum`` to the rank's whole process group (torchrun and its workers)."""
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signum)


def _die_with_parent() -> None:
    """In the rank's child: SIGTERM when the actor's process dies (Linux), so a rank never
    outlives a gang whose driver was killed."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class Gang:
    """The driver: reserve the nodes, start the ranks, relay output and signals."""

    def __init__(self, args: argparse.Namespace, env: dict[str, str]) -> None:
        self.args, self.env = args, env
        self.stop_signal: int | None = None
        self._pending = [b""] * args.nodes  # each rank's unfinished last line

    def run(self) -> int:
        import ray

        ray.init(log_to_driver=False)  # RAY_ADDRESS: set by Ray's job supervisor
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        group = self._reserve()
        try:
            ranks = self._start(group)
            return self._follow(ranks)
        finally:
            ray.util.remove_placement_group(group)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stop_signal = signum

    def _say(self, text: str) -> None:
        print(f"[rota gang {self.args.key}] {text}", flush=True)

    def _reserve(self) -> Any:
        from ray.util.placement_group import placement_group

        bundles = [bundle(self.args)] * self.args.nodes
        group = placement_group(bundles, strategy="STRICT_SPREAD", name=self.args.key)
        self._say(f"waiting for {self.args.nodes} nodes, each with {bundles[0]}")
        noted = time.monotonic()
        while not _ready(group, 1.0):
            if self.stop_signal is not None:
                sys.exit(128 + self.stop_signal)  # nothing runs yet: nothing to hand over
            if time.monotonic() - noted > _WAIT_NOTE:
                noted = time.monotonic()
                self._say(f"still waiting for {self.args.nodes} nodes with {bundles[0]} "
                          "(placement group pending: `ray status` shows the demand)")
        return group

    def _start(self, group: Any) -> list[Any]:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        share = bundle(self.args)
        actor: Any = ray.remote(Rank)
        ranks: list[Any] = [actor.options(
            num_cpus=share["CPU"], num_gpus=share.get("GPU", 0),
            memory=share.get("memory"), name=f"{self.args.key}-rank{i}",
            resources={k: v for k, v in share.items() if k.startswith("accelerator_type:")},
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=group, placement_group_bundle_index=i),
        ).remote(i) for i in range(self.args.nodes)]
        addresses = ray.get([r.address.remote() for r in ranks])
        master = addresses[0]
        self._say(f"ranks on {[a[0] for a in addresses]}; MASTER_ADDR={master[0]} "
                  f"MASTER_PORT={master[1]}")
        ray.get([r.start.remote(self.args.command,
                                {**self.env, **rank_env(i, self.args.nodes, master,
                                                        self.args.nproc)}, self.args.cwd)
                 for i, r in enumerate(ranks)])
        return ranks

    def _follow(self, ranks: list[Any]) -> int:
        import ray

        deadline: float | None = None
        first_failure: int | None = None
        while True:
            self._relay(ray.get([r.drain.remote() for r in ranks]))
            codes = ray.get([r.exit_code.remote() for r in ranks])
            if all(c is not None for c in codes):
                break
            failed = [c for c in codes if c not in (None, 0)]
            if deadline is None and failed and self.stop_signal is None:
                first_failure = worst(failed)  # what the others' stop would hide
            if deadline is None and (self.stop_signal is not None or failed):
                sig = self.stop_signal or signal.SIGTERM
                why = "stop signal" if self.stop_signal else "a rank failed"
                self._say(f"{why}: {signal.Signals(sig).name} to every rank")
                ray.get([r.signal.remote(sig) for r in ranks])
                deadline = time.monotonic() + self.args.grace
            elif deadline is not None and time.monotonic() > deadline:
                self._say(f"grace of {self.args.grace:g}s over: SIGKILL to every rank")
                ray.get([r.signal.remote(signal.SIGKILL) for r in ranks])
                deadline = float("inf")
            time.sleep(_TICK)
        self._relay(ray.get([r.drain.remote() for r in ranks]), final=True)
        self._say(f"exit codes by rank: {codes}")
        return first_failure or worst([c for c in codes if c is not None])

    def _relay(self, chunks: list[bytes], final: bool = False) -> None:
        """Each rank's complete lines to this job's output, prefixed with its rank."""
        out = sys.stdout.buffer
        for i, chunk in enumerate(chunks):
            lines = (self._pending[i] + chunk).split(b"\n")
            rest = lines.pop()
            if final and rest:
                lines.append(rest)
            self._pending[i] = b"" if final else rest
            for line in lines:
                out.write(b"[rank %d] %s\n" % (i, line))
        out.flush()


def _ready(group: Any, timeout: float) -> bool:
    import ray
    from ray.exceptions import GetTimeoutError

    try:
        ray.get(group.ready(), timeout=timeout)
    except GetTimeoutError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
