"""Every file under deploy/ parses, both overlays render, and every object validates offline.

Built-in kinds are checked by kubernetes-validate (strict: unknown fields are errors) against the
Kubernetes JSON schemas of the oldest release we support (1.30: Pod scheduling gates are GA there)
and of the newest release the package ships. cert-manager and CloudNativePG kinds are checked against
the structural schemas of tests/deploy/operator_schemas.py, our own kinds against deploy/crds.
"""

from __future__ import annotations

from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest

from tests.deploy import crdschema
from tests.deploy.conftest import DEPLOY, OVERLAYS, Obj, load_crds, load_yaml_documents, render
from tests.deploy.operator_schemas import SCHEMAS

OLDEST_SUPPORTED = "1.30"
NEWEST = kubernetes_validate.latest_version()
KUSTOMIZATIONS = ("kustomization.yaml", "kustomization.yml", "Kustomization")


def _manifest_files() -> list[Path]:
    not_kubernetes = DEPLOY / "grafana"  # Prometheus and Grafana configs of the compose profile
    return sorted(p for p in DEPLOY.rglob("*.y*ml") if p.name not in KUSTOMIZATIONS and not_kubernetes not in p.parents)


def _label(obj: Obj) -> str:
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"


@pytest.mark.parametrize("path", _manifest_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_manifest_file_parses_into_kubernetes_objects(path: Path) -> None:
    documents = load_yaml_documents(path)
    assert documents, f"{path} holds no YAML document"
    for doc in documents:
        assert {"apiVersion", "kind", "metadata"} <= doc.keys(), f"{path}: {doc!r:.120} is not an object"
        assert doc["metadata"].get("name"), f"{path}: a {doc['kind']} without metadata.name"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_every_component(rendered: dict[str, list[Obj]], overlay: str) -> None:
    names = {_label(o) for o in rendered[overlay]}
    expected = {
        "Namespace/gpuledger-system", "StatefulSet/gpuledger-nats", "Deployment/gpuledger-allocator",
        "PodDisruptionBudget/gpuledger-allocator", "Deployment/gpuledger-admission",
        "Service/gpuledger-admission", "MutatingWebhookConfiguration/gpuledger-admission",
        "Certificate/gpuledger-admission", "Deployment/gpuledger-discovery",
        "DaemonSet/gpuledger-discovery-nvml", "Deployment/gpuledger-autoscaler",
        "NetworkPolicy/default-deny-ingress",
    }
    expected |= {f"CustomResourceDefinition/{crd['metadata']['name']}" for crd in load_crds()}
    assert expected <= names, f"missing from {overlay}: {sorted(expected - names)}"
    assert {o["metadata"].get("namespace") for o in rendered[overlay]
            if o["kind"] not in _CLUSTER_SCOPED} == {"gpuledger-system"}


_CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                   "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "PriorityClass"}


def _validate_builtin(obj: Obj, version: str) -> str | None:
    """None when valid (or not a built-in kind: returns "no schema"), else the error message."""
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return "no schema"
    except kubernetes_validate.ValidationError as exc:
        where = ".".join(map(str, exc.absolute_path)) or "<root>"
        return f"{_label(obj)} (Kubernetes {version}): {where}: {exc.message}"
    return None


def _validate(obj: Obj, version: str, crd_validators: dict[tuple[str, str], object]) -> list[str]:
    outcome = _validate_builtin(obj, version)
    if outcome != "no schema":
        return [outcome] if outcome else []
    key = (obj["apiVersion"], obj["kind"])
    if key in SCHEMAS:
        validator = jsonschema.Draft7Validator(SCHEMAS[key])
    elif key in crd_validators:
        validator = crd_validators[key]  # type: ignore[assignment]
    else:
        return [f"{_label(obj)}: no schema for {key} (not a built-in, operator or gpuledger kind)"]
    return [f"{_label(obj)}: {e}" for e in crdschema.errors_of(validator, obj)]


@pytest.mark.parametrize("version", [OLDEST_SUPPORTED, NEWEST])
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_object_validates_offline(rendered: dict[str, list[Obj]], overlay: str,
                                                 version: str) -> None:
    validators = crdschema.crd_validators(load_crds())
    errors = [e for obj in rendered[overlay] for e in _validate(obj, version, validators)]
    assert not errors, "\n".join(errors)


def test_examples_validate_offline() -> None:
    validators = crdschema.crd_validators(load_crds())
    objects = [doc for path in sorted((DEPLOY / "examples").glob("*.yaml")) for doc in load_yaml_documents(path)]
    assert {o["kind"] for o in objects} >= {"WorkloadProfile", "GPUResourceQuota", "Pod"}
    errors = [e for obj in objects for e in _validate(obj, NEWEST, validators)]
    assert not errors, "\n".join(errors)


def test_validation_catches_a_misspelt_field(rendered: dict[str, list[Obj]]) -> None:
    """The strict schemas are really applied: a typo in a Deployment and in a Certificate is reported."""
    validators = crdschema.crd_validators(load_crds())
    deployment = next(o for o in rendered["prod"] if o["kind"] == "Deployment")
    broken = {**deployment, "spec": {**deployment["spec"], "replica": 2}}
    assert any("replica" in e for e in _validate(broken, NEWEST, validators))
    certificate = next(o for o in rendered["prod"] if o["kind"] == "Certificate")
    broken = {**certificate, "spec": {**certificate["spec"], "dnsName": ["x"]}}
    assert any("dnsName" in e for e in _validate(broken, NEWEST, validators))


def test_kustomize_failure_is_reported_with_its_message(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: [missing.yaml]\n")
    with pytest.raises(AssertionError, match=r"missing\.yaml"):
        render(tmp_path)


@pytest.mark.parametrize("path", sorted(DEPLOY.rglob("kustomization.yaml")),
                         ids=lambda p: str(p.parent.relative_to(DEPLOY)))
def test_every_kustomization_lists_only_existing_files_and_every_manifest_beside_it(path: Path) -> None:
    (kustomization,) = load_yaml_documents(path)
    assert kustomization["kind"] in ("Kustomization", "Component")
    listed = set(kustomization.get("resources") or [])
    for resource in listed:
        assert (path.parent / resource).exists(), f"{path}: {resource} does not exist"
    beside = {p.name for p in path.parent.glob("*.yaml") if p.name != "kustomization.yaml"}
    assert beside <= listed, f"{path}: {sorted(beside - listed)} are in the folder but not applied"
