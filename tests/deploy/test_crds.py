"""The CRDs of deploy/crds (WorkloadProfile, GPUResourceQuota, GPUShare) are valid CRDs whose openAPIV3Schema
accepts the documented examples of deploy/examples and rejects malformed resources, as ``kubectl apply``
against a real API server would (tests/deploy/crdschema.py).
"""

from __future__ import annotations

import kubernetes_validate
import pytest

from tests.deploy import crdschema
from tests.deploy.conftest import DEPLOY, Obj, load_crds, load_yaml_documents

MALFORMED = DEPLOY.parent / "tests" / "deploy" / "data" / "malformed.yaml"


def _examples() -> list[Obj]:
    return [doc for path in sorted((DEPLOY / "examples").glob("*.y*ml")) for doc in load_yaml_documents(path)
            if doc["apiVersion"].startswith(("tensor-fusion.ai/", "gpuledger.io/"))]


def test_crds_define_workloadprofile_gpuresourcequota_and_gpushare() -> None:
    crds = load_crds()
    kinds = {(c["spec"]["group"], c["spec"]["names"]["kind"]) for c in crds}
    assert {("tensor-fusion.ai", "WorkloadProfile"), ("tensor-fusion.ai", "GPUResourceQuota"),
            ("gpuledger.io", "GPUShare")} <= kinds
    for crd in crds:
        kubernetes_validate.validate(crd, kubernetes_validate.latest_version(), strict=True)
        assert crd["metadata"]["name"] == f"{crd['spec']['names']['plural']}.{crd['spec']['group']}"
        storage = [v["name"] for v in crd["spec"]["versions"] if v.get("storage")]
        assert len(storage) == 1, f"{crd['metadata']['name']}: exactly one storage version"


@pytest.mark.parametrize("example", _examples(), ids=lambda o: f"{o['kind']}/{o['metadata']['name']}")
def test_crd_schema_accepts_the_documented_example(example: Obj) -> None:
    validator = crdschema.crd_validators(load_crds())[(example["apiVersion"], example["kind"])]
    assert crdschema.errors_of(validator, example) == []


@pytest.mark.parametrize("bad", load_yaml_documents(MALFORMED), ids=lambda o: o["kind"])
def test_crd_schema_rejects_a_malformed_resource_naming_each_field(bad: Obj) -> None:
    validator = crdschema.crd_validators(load_crds())[(bad["apiVersion"], bad["kind"])]
    errors = crdschema.errors_of(validator, bad)
    for field in bad["metadata"]["annotations"]["gpuledger.io/expect-errors"].split():
        parent, _, leaf = field.rpartition(".")
        assert any(e.startswith(f"{field}:") or (e.startswith(f"{parent}:") and repr(leaf) in e)
                   for e in errors), f"{field} was not rejected; errors: {errors}"


def test_examples_cover_every_kind() -> None:
    assert {o["kind"] for o in _examples()} == {"WorkloadProfile", "GPUResourceQuota", "GPUShare"}


def test_schema_translation_follows_the_api_server_rules() -> None:
    """int-or-string, nullable, strict unknown fields, and preserve-unknown-fields as the API server."""
    crd = {"spec": {"group": "example.io", "names": {"kind": "Thing"}, "versions": [{
        "name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
            "type": "object", "properties": {"spec": {"type": "object", "required": ["size"], "properties": {
                "size": {"x-kubernetes-int-or-string": True},
                "note": {"type": "string", "nullable": True},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                          "properties": {"known": {"type": "integer"}}},
            }}}}}}]}}
    validator = crdschema.crd_validators([crd])[("example.io/v1", "Thing")]

    def errors(spec: Obj) -> list[str]:
        return crdschema.errors_of(validator, {"apiVersion": "example.io/v1", "kind": "Thing",
                                               "metadata": {"name": "t"}, "spec": spec})

    assert errors({"size": 3, "note": None, "extra": {"anything": 1}}) == []
    assert errors({"size": "3Gi"}) == []
    assert errors({"size": [3]})[0].startswith("spec.size:")
    assert "'typo' was unexpected" in errors({"size": 1, "typo": 1})[0]
    assert errors({"note": "x"}) == ["spec: 'size' is a required property"]
