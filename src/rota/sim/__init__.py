"""The what-if simulator: a virtual clock that drives the daemon's own ``core.schedule``
and ``core.outcome`` over a trace of jobs (docs/simulator.md)."""

from rota.sim.cluster import Cluster, parse_cluster
from rota.sim.engine import simulate
from rota.sim.metrics import Metrics
from rota.sim.policies import POLICIES
from rota.sim.trace import SimJob

__all__ = ["POLICIES", "Cluster", "Metrics", "SimJob", "parse_cluster", "simulate"]
