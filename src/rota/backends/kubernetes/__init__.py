"""The Kubernetes engine: a batch/v1 Job for one node, a Kubeflow PyTorchJob for several.

Rendering (``render``) is pure and needs no client; the ``kubernetes`` package (an
optional extra) is imported only where the API is called (client.py).
"""

from rota.backends.kubernetes.client import KubernetesEngine
from rota.backends.kubernetes.refusal import refusal
from rota.backends.kubernetes.render import manifests, render_yaml, secret_manifest

__all__ = ["KubernetesEngine", "manifests", "refusal", "render_yaml", "secret_manifest"]
