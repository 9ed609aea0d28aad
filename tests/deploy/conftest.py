"""Fixtures of the deployment tests: the repository's manifests, rendered with ``kubectl kustomize``.

Rendering needs kubectl (or a standalone kustomize); without either the tests that need a rendering
are skipped with that reason. Nothing here talks to a cluster.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
OVERLAYS = ("dev", "prod")
Obj = dict[str, Any]


def kustomize_command() -> list[str] | None:
    """``kubectl kustomize`` or ``kustomize build``, whichever is installed; None when neither is."""
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    return None


def render(directory: Path) -> list[Obj]:
    """The objects a kustomization renders to; raises AssertionError with kustomize's message."""
    command = kustomize_command()
    if command is None:
        pytest.skip("neither kubectl nor kustomize is installed: cannot render deploy/ (install kubectl)")
    result = subprocess.run([*command, str(directory)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"{' '.join(command)} {directory} failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[Obj]]:
    """Overlay name ("dev", "prod") -> its rendered objects."""
    return {name: render(DEPLOY / "overlays" / name) for name in OVERLAYS}


def load_yaml_documents(path: Path) -> list[Obj]:
    """Every non-empty YAML document of a file (raises yaml.YAMLError when it does not parse)."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def load_crds() -> list[Obj]:
    """The CustomResourceDefinitions of deploy/crds."""
    return [doc for path in sorted((DEPLOY / "crds").glob("*.y*ml")) for doc in load_yaml_documents(path)
            if doc.get("kind") == "CustomResourceDefinition"]


def find(objects: list[Obj], kind: str, name: str) -> Obj:
    """The object of that kind and name; fails the test naming what is missing."""
    for obj in objects:
        if obj.get("kind") == kind and obj.get("metadata", {}).get("name") == name:
            return obj
    raise AssertionError(f"no {kind} {name!r} in the rendered manifests")


def workloads(objects: list[Obj]) -> list[Obj]:
    """Deployments, StatefulSets, DaemonSets and Jobs."""
    return [o for o in objects if o.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "Job")]


def pod_spec(workload: Obj) -> Obj:
    """The pod template spec of a workload."""
    spec: Obj = workload["spec"]["template"]["spec"]
    return spec


def container_env(objects: list[Obj], container: Obj) -> dict[str, str]:
    """A container's environment: its envFrom ConfigMaps, then env; secret references read as
    ``secret:<name>/<key>`` and downward-API fields as ``field:<path>``."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(find(objects, "ConfigMap", source["configMapRef"]["name"])["data"])
    for item in container.get("env", []):
        source = item.get("valueFrom", {})
        if "secretKeyRef" in source:
            env[item["name"]] = f"secret:{source['secretKeyRef']['name']}/{source['secretKeyRef']['key']}"
        elif "fieldRef" in source:
            env[item["name"]] = f"field:{source['fieldRef']['fieldPath']}"
        else:
            env[item["name"]] = item.get("value", "")
    return env
