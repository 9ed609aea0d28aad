"""The rendered objects fit together: names referenced exist, the webhook reaches its Service with a
certificate for that Service, every container is probed, bounded and non-root, every listening port
is opened by a NetworkPolicy, and the high-availability pieces (R3 NATS, 2 allocators, PDBs) hold.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.conftest import DEPLOY, OVERLAYS, Obj, container_env, find, pod_spec, render, workloads

# Objects that operators create at run time, so they are referenced but never rendered.
CREATED_BY_OPERATORS = {
    ("Secret", "gpuledger-admission-tls"): "cert-manager, from Certificate gpuledger-admission",
    ("Secret", "gpuledger-db-app"): "CloudNativePG, from Cluster gpuledger-db (prod)",
    ("Secret", "gpuledger-nats-tls"): "cert-manager, from Certificate gpuledger-nats",
    ("Secret", "gpuledger-nats-auth"): "the operator, with generated passwords (prod; docs/deploy.md)",
    ("Secret", "gpuledger-api-token"): "the operator, with a generated token (prod; docs/deploy.md)",
}


def _refs(spec: Obj) -> set[tuple[str, str]]:
    """(kind, name) of every ConfigMap, Secret and ServiceAccount a pod spec names."""
    refs = {("ServiceAccount", spec.get("serviceAccountName", "default"))}
    for volume in spec.get("volumes", []):
        if "secret" in volume:
            refs.add(("Secret", volume["secret"]["secretName"]))
        if "configMap" in volume:
            refs.add(("ConfigMap", volume["configMap"]["name"]))
    for container in spec.get("initContainers", []) + spec["containers"]:
        for source in container.get("envFrom", []):
            for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                if key in source:
                    refs.add((kind, source[key]["name"]))
        for env in container.get("env", []):
            for kind, key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                if key in env.get("valueFrom", {}):
                    refs.add((kind, env["valueFrom"][key]["name"]))
    return refs


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_referenced_object_exists(rendered: dict[str, list[Obj]], overlay: str) -> None:
    objects = rendered[overlay]
    present = {(o["kind"], o["metadata"]["name"]) for o in objects} | {("ServiceAccount", "default")}
    missing = {ref for w in workloads(objects) for ref in _refs(pod_spec(w))} - present
    unexplained = {ref for ref in missing if ref not in CREATED_BY_OPERATORS}
    assert not unexplained, f"{overlay}: referenced but not rendered: {sorted(unexplained)}"
    if overlay == "dev":  # no operator makes these Secrets in dev: the overlay must
        for name in ("gpuledger-db-app", "gpuledger-nats-auth", "gpuledger-api-token"):
            assert ("Secret", name) in present, name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_webhook_reaches_its_service_over_a_certificate_for_it(rendered: dict[str, list[Obj]],
                                                               overlay: str) -> None:
    objects = rendered[overlay]
    config = find(objects, "MutatingWebhookConfiguration", "gpuledger-admission")
    (hook,) = config["webhooks"]
    target = hook["clientConfig"]["service"]
    service = find(objects, "Service", target["name"])
    assert target["namespace"] == service["metadata"]["namespace"]
    assert target.get("port", 443) in {p["port"] for p in service["spec"]["ports"]}
    assert hook["objectSelector"] == {"matchLabels": {"tensor-fusion.ai/enabled": "true"}}
    assert hook["failurePolicy"] == "Fail" and 1 <= hook["timeoutSeconds"] <= 10
    assert hook["rules"][0]["resources"] == ["pods"] and "CREATE" in hook["rules"][0]["operations"]
    assert hook["sideEffects"] in ("None", "NoneOnDryRun")
    namespace, name = config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].split("/")
    certificate = find(objects, "Certificate", name)
    assert certificate["metadata"]["namespace"] == namespace
    assert f"{service['metadata']['name']}.{namespace}.svc" in certificate["spec"]["dnsNames"]
    issuer = find(objects, certificate["spec"]["issuerRef"].get("kind", "Issuer"),
                  certificate["spec"]["issuerRef"]["name"])
    # Signed by a CA issuer, not self-signed: renewing the serving certificate keeps the trusted root.
    root = find(objects, "Certificate", next(o["metadata"]["name"] for o in objects if o["kind"] == "Certificate"
                                             and o["spec"]["secretName"] == issuer["spec"]["ca"]["secretName"]))
    assert root["spec"]["isCA"] is True
    deployment = find(objects, "Deployment", "gpuledger-admission")
    secrets = {v["secret"]["secretName"] for v in pod_spec(deployment)["volumes"] if "secret" in v}
    assert certificate["spec"]["secretName"] in secrets


def _containers(objects: list[Obj]) -> list[tuple[str, Obj]]:
    return [(f"{w['metadata']['name']}/{c['name']}", c) for w in workloads(objects) for c in pod_spec(w)["containers"]]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_is_bounded_and_unprivileged(rendered: dict[str, list[Obj]], overlay: str) -> None:
    for w in workloads(rendered[overlay]):
        spec = pod_spec(w)
        assert spec.get("securityContext", {}).get("runAsNonRoot") is True, w["metadata"]["name"]
        for c in spec.get("initContainers", []) + spec["containers"]:
            where = f"{w['metadata']['name']}/{c['name']}"
            assert {"cpu", "memory"} <= c["resources"]["requests"].keys(), where
            assert "memory" in c["resources"]["limits"], where
            assert c["securityContext"]["allowPrivilegeEscalation"] is False, where
            assert c["securityContext"]["capabilities"]["drop"] == ["ALL"], where


# Long-running containers without an HTTP listener, and why they go unprobed: each runs its loops in
# one asyncio TaskGroup, so a fatal error ends the process and the kubelet restarts the container.
UNPROBED: dict[str, str] = {
    "gpuledger-discovery/discovery": "services.discovery serves no HTTP endpoint",
    "gpuledger-discovery-nvml/nvml": "services.discovery serves no HTTP endpoint",
    "gpuledger-autoscaler/autoscaler": "services.autoscaler serves no HTTP endpoint (reports go over NATS)",
}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_long_running_container_has_probes(rendered: dict[str, list[Obj]], overlay: str) -> None:
    for where, container in _containers(rendered[overlay]):
        if where in UNPROBED:
            continue
        assert "livenessProbe" in container, f"{where} has no liveness probe"
        assert "readinessProbe" in container, f"{where} has no readiness probe"


def _selects(selector: Obj, labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _opened_ports(policies: list[Obj], labels: dict[str, str]) -> set[Any]:
    ports: set[Any] = set()
    for policy in policies:
        if _selects(policy["spec"]["podSelector"], labels):
            for rule in policy["spec"].get("ingress", []):
                ports |= {p["port"] for p in rule.get("ports", [])}
    return ports


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policies_deny_by_default_and_open_every_served_port(rendered: dict[str, list[Obj]],
                                                                     overlay: str) -> None:
    objects = rendered[overlay]
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    deny = find(objects, "NetworkPolicy", "default-deny-ingress")["spec"]
    assert deny["podSelector"] == {} and "ingress" not in deny and deny["policyTypes"] == ["Ingress"]
    for w in workloads(objects):
        labels = w["spec"]["template"]["metadata"]["labels"]
        served = {p["containerPort"] for c in pod_spec(w)["containers"] for p in c.get("ports", [])}
        missing = served - _opened_ports(policies, labels)
        assert not missing, f"{overlay}: {w['metadata']['name']} listens on {sorted(missing)} behind deny-all"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_high_availability_shape(rendered: dict[str, list[Obj]], overlay: str) -> None:
    objects = rendered[overlay]
    nats = find(objects, "StatefulSet", "gpuledger-nats")
    assert nats["spec"]["replicas"] == 3
    config = find(objects, "ConfigMap", _config_name(objects, "gpuledger-nats-config"))
    assert "jetstream" in config["data"]["nats.conf"] and config["data"]["nats.conf"].count("nats://") == 3
    allocator = find(objects, "Deployment", "gpuledger-allocator")
    assert allocator["spec"]["replicas"] == 2
    assert allocator["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    env = container_env(objects, pod_spec(allocator)["containers"][0])
    assert env["GPULEDGER_STREAM_REPLICAS"] == "3", "streams must be R3 on the 3-server NATS cluster"
    for name, kind in (("gpuledger-allocator", "Deployment"), ("gpuledger-nats", "StatefulSet"),
                       ("gpuledger-admission", "Deployment"), ("gpuledger-api", "Deployment")):
        pdb = find(objects, "PodDisruptionBudget", name)
        workload = find(objects, kind, name)
        assert pdb["spec"]["selector"] == workload["spec"]["selector"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_readers_serve_the_api_apart_from_the_writer(rendered: dict[str, list[Obj]], overlay: str) -> None:
    """The HTTP API is the readers' (`gpuledger api`, more than one replica, their own Service); the
    allocator (the writer) runs no API, takes no API token, and whoever calls the API calls the readers."""
    objects = rendered[overlay]
    api = find(objects, "Deployment", "gpuledger-api")
    assert api["spec"]["replicas"] >= 2 and api["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    (reader,) = pod_spec(api)["containers"]
    assert reader["args"] == ["api"] and reader["readinessProbe"]["httpGet"]["path"] == "/readyz"
    env = container_env(objects, reader)
    assert env["GPULEDGER_DATABASE_URL"] == "secret:gpuledger-db-app/uri"
    assert env["GPULEDGER_NATS_USER"] == "api" and env["GPULEDGER_NATS_INBOX_PREFIX"] == "_INBOX_api"
    assert env["GPULEDGER_API_TOKEN"] == "secret:gpuledger-api-token/token"
    service = find(objects, "Service", "gpuledger-api")
    assert _selects({"matchLabels": service["spec"]["selector"]}, api["spec"]["template"]["metadata"]["labels"])
    (writer,) = pod_spec(find(objects, "Deployment", "gpuledger-allocator"))["containers"]
    assert "GPULEDGER_API_TOKEN" not in container_env(objects, writer)
    admission = container_env(objects, pod_spec(find(objects, "Deployment", "gpuledger-admission"))["containers"][0])
    api_urls = [v for k, v in admission.items() if k.endswith("_URL") and v.startswith("http://")]
    assert api_urls and all(v.startswith("http://gpuledger-api:") for v in api_urls), api_urls
    db = find(objects, "NetworkPolicy", "gpuledger-db")["spec"]["ingress"]
    readers_reach_db = any(_selects(peer.get("podSelector", {}), {"app.kubernetes.io/name": "gpuledger-api"})
                           for rule in db for peer in rule.get("from", []))
    assert readers_reach_db, "the readers follow the log in PostgreSQL"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_migrations_run_before_the_allocator_starts(rendered: dict[str, list[Obj]], overlay: str) -> None:
    spec = pod_spec(find(rendered[overlay], "Deployment", "gpuledger-allocator"))
    (init,) = spec["initContainers"]
    (main,) = spec["containers"]
    assert init["args"] == ["migrate"] and main["args"][0] == "allocator"
    assert init["image"] == main["image"]
    objects = rendered[overlay]
    url = container_env(objects, init)["GPULEDGER_DATABASE_URL"]
    assert url == container_env(objects, main)["GPULEDGER_DATABASE_URL"] == "secret:gpuledger-db-app/uri"


def test_prod_uses_cloudnativepg_and_dev_a_statefulset(rendered: dict[str, list[Obj]]) -> None:
    cluster = find(rendered["prod"], "Cluster", "gpuledger-db")
    assert cluster["spec"]["instances"] >= 3
    assert cluster["spec"]["inheritedMetadata"]["labels"]["app.kubernetes.io/name"] == "gpuledger-db"
    assert not [o for o in rendered["prod"] if o["kind"] == "StatefulSet" and "db" in o["metadata"]["name"]]
    dev_db = find(rendered["dev"], "StatefulSet", "gpuledger-db")
    assert dev_db["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "gpuledger-db"
    service = find(rendered["dev"], "Service", "gpuledger-db-rw")  # the name CloudNativePG gives its primary
    assert _selects({"matchLabels": service["spec"]["selector"]}, dev_db["spec"]["template"]["metadata"]["labels"])
    uri = find(rendered["dev"], "Secret", "gpuledger-db-app")
    assert "uri" in uri.get("data", {}) or "uri" in uri.get("stringData", {})


def _config_name(objects: list[Obj], prefix: str) -> str:
    """The rendered (hash-suffixed) name of a generated ConfigMap."""
    (name,) = [o["metadata"]["name"] for o in objects
               if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith(prefix)]
    return name


def test_the_api_server_component_admits_only_the_listed_addresses_to_the_webhook(tmp_path: Path) -> None:
    """deploy/components/webhook-from-apiserver on the prod overlay: the webhook's port is open to the
    listed block only; every other policy is unchanged."""
    (tmp_path / "kustomization.yaml").write_text(  # kustomize takes relative paths only
        f"resources: [{os.path.relpath(DEPLOY / 'overlays' / 'prod', tmp_path)}]\n"
        f"components: [{os.path.relpath(DEPLOY / 'components' / 'webhook-from-apiserver', tmp_path)}]\n")
    objects = render(tmp_path)
    policy = find(objects, "NetworkPolicy", "gpuledger-admission")["spec"]
    assert policy["ingress"] == [{"from": [{"ipBlock": {"cidr": "192.0.2.10/32"}}], "ports": [{"port": 9443}]}]
    plain = render(DEPLOY / "overlays" / "prod")
    assert [o for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] != "gpuledger-admission"] \
        == [o for o in plain if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] != "gpuledger-admission"]
