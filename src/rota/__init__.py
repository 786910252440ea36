"""Rota: a GPU job scheduler and ML run orchestrator."""

__version__ = "0.1.0"
