"""docker-compose.yml parses and describes the stack of issue 9 with a health-checked start order.

No Docker engine runs here, so these are structural checks of the file against the Compose
specification's rules that matter for start-up: known dependency conditions, a health check behind
every ``service_healthy``, no cycles, declared volumes, documented host ports.
"""

from __future__ import annotations

import re
from graphlib import TopologicalSorter
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import REPO

COMPOSE = REPO / "docker-compose.yml"
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
GPULEDGER_IMAGE = "gpuledger:dev"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def _depends(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on", {})
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: spec.get("condition", "service_started") for name, spec in deps.items()}


def _has_healthcheck(service: dict[str, Any]) -> bool:
    check = service.get("healthcheck")
    if check is not None:
        return not check.get("disable", False) and bool(check.get("test"))
    return service.get("image") == GPULEDGER_IMAGE  # the image's own HEALTHCHECK


def test_top_level_keys_are_compose_keys(compose: dict[str, Any]) -> None:
    allowed = {"name", "services", "volumes", "networks", "configs", "secrets"}
    assert {k for k in compose if not k.startswith("x-")} <= allowed


def test_the_stack_of_issue_9_is_there(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["nats"]["image"].startswith("nats:") and "-js" in services["nats"]["command"]
    assert services["postgres"]["image"].startswith("postgres:")
    commands = {name: s["command"] for name, s in services.items() if s.get("image") == GPULEDGER_IMAGE}
    by_service = sorted(c[0] for c in commands.values())
    assert by_service == ["admission", "allocator", "allocator", "api", "autoscaler", "discovery", "migrate"]
    discovery = next(c for c in commands.values() if c[0] == "discovery")
    assert discovery[discovery.index("--source") + 1] == "static"
    inventory = discovery[discovery.index("--file") + 1]
    assert inventory.startswith("data/openb/") and (REPO / inventory).is_file()
    assert services["migrate"]["restart"] == "no"


def test_state_lives_in_named_volumes(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes", {}))
    mounts = {name: [v.split(":") for v in s.get("volumes", [])] for name, s in compose["services"].items()}
    assert [m[1] for m in mounts["nats"] if not m[0].startswith(".")] == ["/data"]
    assert "/data" in compose["services"]["nats"]["command"]
    assert [m[1] for m in mounts["postgres"]] == ["/var/lib/postgresql/data"]
    used = {m[0] for ms in mounts.values() for m in ms if not m[0].startswith((".", "/"))}
    assert used <= declared, f"undeclared volumes: {used - declared}"


def test_start_order_is_health_checked_and_acyclic(compose: dict[str, Any]) -> None:
    services = compose["services"]
    graph = {name: set(_depends(s)) for name, s in services.items()}
    order = list(TopologicalSorter(graph).static_order())  # raises CycleError on a cycle
    for name, service in services.items():
        for dep, condition in _depends(service).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            assert condition in CONDITIONS, f"{name} -> {dep}: {condition}"
            if condition == "service_healthy":
                assert _has_healthcheck(services[dep]), f"{name} waits for {dep}, which has no health check"
    for allocator in ("allocator-1", "allocator-2"):
        assert _depends(services[allocator]) == {"migrate": "service_completed_successfully",
                                                 "nats": "service_healthy"}
        assert order.index("migrate") < order.index(allocator)
    assert _depends(services["migrate"]) == {"postgres": "service_healthy"}
    for producer in ("admission", "discovery", "autoscaler"):
        assert _depends(services[producer]).get("allocator-1") == "service_healthy", producer


def test_leader_and_standby_are_distinct_replicas(compose: dict[str, Any]) -> None:
    one, two = (compose["services"][f"allocator-{i}"] for i in (1, 2))
    assert one["environment"]["GPULEDGER_HOLDER"] != two["environment"]["GPULEDGER_HOLDER"]
    assert one["environment"]["GPULEDGER_DATABASE_URL"] == two["environment"]["GPULEDGER_DATABASE_URL"]
    assert one["ports"] != two["ports"]


def _host_port(mapping: str) -> str:
    """The published host port of ``"127.0.0.1:${VAR:-8480}:8480"`` or ``"127.0.0.1:8480:8480"``."""
    host = mapping.rsplit(":", 1)[0].removeprefix("127.0.0.1:")
    match = re.fullmatch(r"\$\{\w+:-(\d+)\}|(\d+)", host)
    assert match, f"unexpected port mapping {mapping!r}"
    return match[1] or match[2]


def test_every_published_port_is_documented_in_the_header(compose: dict[str, Any]) -> None:
    header = "".join(line for line in COMPOSE.read_text().splitlines(keepends=True) if line.startswith("#"))
    for name, service in compose["services"].items():
        for mapping in service.get("ports", []):
            port = _host_port(mapping)
            assert re.search(rf"#\s+{port}\s", header), f"{name}: host port {port} is not documented"


def test_every_published_port_is_on_loopback_only(compose: dict[str, Any]) -> None:
    """A developer's stack is reachable from this machine only (docs/security.md)."""
    published = [(name, m) for name, s in compose["services"].items() for m in s.get("ports", [])]
    assert published
    for name, mapping in published:
        assert isinstance(mapping, str) and mapping.startswith("127.0.0.1:"), f"{name}: {mapping}"
    assert not any(m.endswith(":8222") for _, m in published), "the NATS monitor is not published"


def test_no_fixed_secret_the_stack_authenticates_with(compose: dict[str, Any]) -> None:
    """Passwords and tokens come from .env (``${VAR:?...}``: compose refuses to start without them)."""
    text = COMPOSE.read_text()
    assert "gpuledger:gpuledger@" not in text and "POSTGRES_PASSWORD: gpuledger" not in text
    for name, service in compose["services"].items():
        for key, value in service.get("environment", {}).items():
            if key.endswith(("PASSWORD", "TOKEN")):
                assert re.fullmatch(r"\$\{GPULEDGER_\w+:\?[^}]+\}", str(value)), f"{name}: {key}={value}"
    users = {s["environment"].get("GPULEDGER_NATS_USER") for s in compose["services"].values()
             if s.get("image") == GPULEDGER_IMAGE and s["command"][0] != "migrate"}
    assert users == {"allocator", "admission", "discovery", "autoscaler", "api"}
