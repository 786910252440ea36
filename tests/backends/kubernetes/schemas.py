"""Validation against the published schemas: Kubernetes 1.30 (kubernetes-validate, strict:
unknown fields fail), the PyTorchJob CRD of training-operator v1.9.0 (crds/: the file of
shared/schemas, Apache-2.0, training-operator tag v1.9.0, commit 6f74c7f6b2ed,
manifests/base/crds/; its spec.versions[0].schema.openAPIV3Schema is a PyTorchJob's) and
the TrainJob CRD of Kubeflow Trainer v2 (Apache-2.0, kubeflow/trainer
manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml) twice: at commit a55f03a8ccb7
(the file of shared/schemas) and at tag v2.0.0 (commit 117ad23a73d1, the first release).
A TrainJob must pass both."""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate  # the test extra installs it: its absence is a failure
import yaml
from jsonschema.protocols import Validator

K8S_VERSION = "1.30.0"
CRDS = Path(__file__).with_name("crds")
PYTORCHJOB_CRD = CRDS / "kubeflow.org_pytorchjobs.v1.9.0.yaml"
TRAINJOB_CRDS = (CRDS / "trainer.kubeflow.org_trainjobs.a55f03a8.yaml",
                 CRDS / "trainer.kubeflow.org_trainjobs.v2.0.0.yaml")


# Kubernetes' quantity syntax (resource.Quantity), as the CRD spells it; the built-in
# schemas of kubernetes-validate leave quantities unchecked, so the tests add it.
QUANTITY = re.compile(r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]"
                      r"|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")


def validate_builtin(obj: dict[str, Any]) -> None:
    """A built-in kind (Job, ConfigMap, Secret, PodTemplate); raises ValidationError."""
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    for where, value in _quantities(obj):
        if not QUANTITY.match(str(value)):
            raise jsonschema.ValidationError(f"{where}: {value!r} is not a quantity")


def _quantities(obj: Any, where: str = "") -> list[tuple[str, Any]]:
    """Every resource amount and emptyDir size limit in ``obj``."""
    found: list[tuple[str, Any]] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            at = f"{where}.{key}"
            if key in ("requests", "limits") and isinstance(value, dict):
                found += [(f"{at}.{k}", v) for k, v in value.items()]
            elif key == "sizeLimit":
                found.append((at, value))
            else:
                found += _quantities(value, at)
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            found += _quantities(value, f"{where}[{i}]")
    return found


def _strict(schema: Any) -> Any:
    """The CRD schema with unknown fields refused, as the API server's strict field
    validation does (objects that list properties and allow nothing else)."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if ("properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [_strict(v) for v in schema]
    return schema


@functools.cache
def crd_validator(path: Path, version_name: str) -> Validator:
    """The strict schema of the CRD's served version ``version_name``."""
    crd = yaml.safe_load(path.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == version_name]
    assert version["served"], f"{path.name}: {version_name} is not served"
    schema = _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    return jsonschema.Draft7Validator(schema)


def validate_pytorchjob(obj: dict[str, Any]) -> None:
    """The CRD's schema, then each replica's pod template as a strict built-in PodTemplate."""
    assert obj["apiVersion"] == "kubeflow.org/v1" and obj["kind"] == "PyTorchJob"
    crd_validator(PYTORCHJOB_CRD, "v1").validate(obj)
    for spec in obj["spec"]["pytorchReplicaSpecs"].values():
        validate_builtin({"apiVersion": "v1", "kind": "PodTemplate",
                          "metadata": {"name": "replica"}, "template": spec["template"]})


def validate_trainjob(obj: dict[str, Any]) -> None:
    """Both TrainJob CRDs, then the trainer node's pod as the Trainer would merge it from
    the trainer and the pod overrides, as a strict built-in PodTemplate (each mount's
    volume must exist), and every quantity."""
    assert obj["apiVersion"] == "trainer.kubeflow.org/v1alpha1" and obj["kind"] == "TrainJob"
    for crd in TRAINJOB_CRDS:
        crd_validator(crd, "v1alpha1").validate(obj)
    spec = obj["spec"]
    for override in spec.get("podSpecOverrides") or []:
        validate_builtin({"apiVersion": "v1", "kind": "PodTemplate",
                          "metadata": {"name": "node"}, "template": _node_pod(spec, override)})
    for where, value in _quantities(obj):
        if not QUANTITY.match(str(value)):
            raise jsonschema.ValidationError(f"{where}: {value!r} is not a quantity")


def _node_pod(spec: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    trainer = spec.get("trainer") or {}
    container = {"name": "node", "image": trainer.get("image", "runtime-image")}
    for field in ("command", "args", "env"):
        if field in trainer:
            container[field] = trainer[field]
    if "resourcesPerNode" in trainer:
        container["resources"] = trainer["resourcesPerNode"]
    for over in override.get("containers") or []:
        assert over["name"] == "node", f"no container {over['name']!r} in the runtime"
        container.update({k: v for k, v in over.items() if k != "name"})
    volumes = {v["name"] for v in override.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        if mount["name"] not in volumes:
            raise jsonschema.ValidationError(f"volumeMount {mount['name']!r}: no such volume")
    pod = {k: v for k, v in override.items() if k not in ("targetJobs", "containers")}
    return {"spec": {**pod, "restartPolicy": "OnFailure", "containers": [container]}}


def validate_status(obj: dict[str, Any]) -> None:
    """The API server's Status answer (meta/v1 Status: kubernetes-validate has its schema
    but does not find it by ``apiVersion: v1``)."""
    from kubernetes_validate.utils import schema_contents
    from referencing import Registry, Resource

    where = f"kubernetes-json-schema/v{K8S_VERSION}-local-strict"
    schema = schema_contents(f"{where}/status-meta-v1.json", K8S_VERSION)
    defs = schema_contents(f"{where}/_definitions.json", K8S_VERSION)
    registry = Resource.from_contents(defs) @ (Resource.from_contents(schema) @ Registry())
    jsonschema.Draft202012Validator(schema, registry=registry).validate(obj)


def validate(obj: dict[str, Any]) -> None:
    if obj["kind"] == "PyTorchJob":
        validate_pytorchjob(obj)
    elif obj["kind"] == "TrainJob":
        validate_trainjob(obj)
    elif obj["kind"] == "Status":
        validate_status(obj)
    else:
        validate_builtin(obj)
