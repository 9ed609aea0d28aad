"""Least privilege: each service account is granted exactly the Kubernetes API calls its code makes.

The calls are read from the code (tests/deploy/apicalls.py: every kubernetes-asyncio method the
service's modules and their imports name, with REST path and verb taken from kubernetes-asyncio);
the grants are read from the rendered Roles/ClusterRoles and their bindings. A grant the code does
not use fails, and so does a call the RBAC does not allow. A workload whose service account has no
grant must not mount a token at all.
"""

from __future__ import annotations

import pytest

from tests.deploy import apicalls
from tests.deploy.apicalls import Permission
from tests.deploy.conftest import OVERLAYS, Obj, pod_spec, workloads

SERVICES = ("allocator", "admission", "discovery", "autoscaler")

# Workloads that run a service's code with no Kubernetes API access at all, and why that is enough.
NO_API_ACCESS = {
    "gpuledger-discovery-nvml": "the NVML agent reads the GPUs of its own node and publishes to NATS",
}


READER_CODE = {"api": "allocator"}
"""``gpuledger api`` (the readers) runs code of services.allocator (its reader composition root)."""


def _grants(objects: list[Obj], account: str, namespace: str) -> set[Permission]:
    """Every (group, resource, verb) bound to ServiceAccount namespace/account; wildcards are refused."""
    roles = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects
             if o["kind"] in ("Role", "ClusterRole")}
    granted: set[Permission] = set()
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if not any(s["kind"] == "ServiceAccount" and s["name"] == account and s.get("namespace") == namespace
                   for s in binding.get("subjects", [])):
            continue
        ref = binding["roleRef"]
        role_ns = binding["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
        role = roles[(ref["kind"], role_ns, ref["name"])]
        for rule in role.get("rules", []):
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], f"wildcard in {ref['name']}"
            assert "resourceNames" not in rule or rule["resourceNames"], ref["name"]
            granted |= {Permission(g, r, v) for g in rule["apiGroups"] for r in rule["resources"]
                        for v in rule["verbs"]}
    return granted


def _gpuledger_workloads(objects: list[Obj]) -> list[tuple[Obj, str]]:
    """(workload, service) for every workload running the gpuledger image (service = first CLI argument)."""
    found = []
    for workload in workloads(objects):
        container = pod_spec(workload)["containers"][0]
        if container["image"].split(":")[0].endswith("gpuledger"):
            command = container["args"][0]
            found.append((workload, READER_CODE.get(command, command)))
    return found


@pytest.fixture(scope="module")
def needed() -> dict[str, dict[Permission, list[str]]]:
    """Service -> permission -> where its code needs it."""
    return {service: apicalls.required_permissions(f"services.{service}") for service in SERVICES}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_service_account_is_granted_exactly_what_its_code_calls(
        rendered: dict[str, list[Obj]], needed: dict[str, dict[Permission, list[str]]], overlay: str) -> None:
    objects = rendered[overlay]
    runs = _gpuledger_workloads(objects)
    assert {service for _, service in runs} == set(SERVICES), "every service runs in some workload"
    for workload, service in runs:
        name = workload["metadata"]["name"]
        spec = pod_spec(workload)
        granted = _grants(objects, spec.get("serviceAccountName", "default"), workload["metadata"]["namespace"])
        required = set() if name in NO_API_ACCESS else set(needed[service])
        unused = granted - required
        missing = {p: needed[service][p] for p in required - granted}
        assert not unused, f"{overlay} {name}: granted but never called by services.{service}: {sorted(unused)}"
        assert not missing, f"{overlay} {name}: called by the code but not granted: {missing}"
        if not required:
            assert spec.get("automountServiceAccountToken") is False, f"{name} needs no token: do not mount one"


def test_no_service_account_is_shared_between_services(rendered: dict[str, list[Obj]]) -> None:
    accounts: dict[str, str] = {}
    for workload, _ in _gpuledger_workloads(rendered["prod"]):
        account = pod_spec(workload).get("serviceAccountName", "default")
        assert account != "default", f"{workload['metadata']['name']} runs as the default service account"
        assert accounts.setdefault(account, workload["metadata"]["name"]) == workload["metadata"]["name"], account


def test_the_scanner_sees_the_calls_the_services_are_known_to_make(
        needed: dict[str, dict[Permission, list[str]]]) -> None:
    """The admission binder patches pods and discovery watches nodes (issues 5 and 6): if the scan found
    neither, it would be blind and the exact-match test above would pass vacuously."""
    assert Permission("", "pods", "patch") in needed["admission"]
    assert Permission("", "pods/eviction", "create") in needed["admission"]  # preemption (issue 16)
    assert {Permission("", "nodes", "list"), Permission("", "nodes", "watch")} <= needed["discovery"].keys()
    assert not needed["allocator"], "the allocator keeps its lease in PostgreSQL: no Kubernetes API"


def test_scanner_reads_calls_references_partials_and_custom_objects() -> None:
    source = '''
import functools
PLURAL = "gpupools"
def lister(custom, plural):
    return functools.partial(custom.list_cluster_custom_object, "tensor-fusion.ai", "v1", plural)
async def run(core, apps, custom):
    await core.patch_namespaced_pod("p", "ns", {})
    await apps.read_namespaced_replica_set("rs", "ns")
    async for _ in watch_objects(core.list_node):
        pass
    watch_objects(lister(custom, "workloadprofiles"))
    await custom.create_namespaced_custom_object(group="tensor-fusion.ai", version="v1", namespace="ns",
                                                 plural="gpuresourcequotas", body={})
'''
    found = {f.permission for f in apicalls.scan_source(source, module="example")}
    assert found == {
        Permission("", "pods", "patch"), Permission("apps", "replicasets", "get"),
        Permission("", "nodes", "list"), Permission("", "nodes", "watch"),
        Permission("tensor-fusion.ai", "workloadprofiles", "list"),
        Permission("tensor-fusion.ai", "workloadprofiles", "watch"),
        Permission("tensor-fusion.ai", "gpuresourcequotas", "create"),
    }


def test_scanner_refuses_a_custom_object_call_it_cannot_resolve() -> None:
    source = "async def f(custom, g, p):\n    await custom.list_cluster_custom_object(g(), 'v1', p)\n"
    with pytest.raises(LookupError):
        apicalls.scan_source(source, module="example")
