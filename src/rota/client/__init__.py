"""Talking to a Rota daemon from Python."""

from rota.client.client import Client

__all__ = ["Client"]
