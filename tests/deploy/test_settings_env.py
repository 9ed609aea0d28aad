"""Every ``GPULEDGER_*`` variable the compose file and the manifests set is a setting the receiving
service reads, and the values load: a misspelt or misplaced variable would otherwise be ignored.

Each service reads its settings Struct with its own prefix (services/<service>/settings.py);
``GPULEDGER_NATS_URL`` and ``GPULEDGER_DATABASE_URL`` are shared; ``GPULEDGER_HEALTHCHECK_URL`` is
the image's HEALTHCHECK target (Dockerfile), read by no service.
"""

from __future__ import annotations

import base64
import importlib
import re
from typing import Any

import msgspec
import pytest
import yaml

from services.allocator.adapters import database
from services.shared import http_edge
from services.shared import settings as shared_settings
from tests.deploy.conftest import OVERLAYS, REPO, Obj, container_env, pod_spec, workloads

# service -> (settings module, Struct name, environment prefix of its fields)
SETTINGS = {
    "allocator": ("services.allocator.settings", "AllocatorSettings", "GPULEDGER_"),
    "admission": ("services.admission.settings", "AdmissionSettings", "GPULEDGER_ADMISSION_"),
    "discovery": ("services.discovery.settings", "DiscoverySettings", "GPULEDGER_DISCOVERY_"),
    "autoscaler": ("services.autoscaler.settings", "AutoscalerSettings", "GPULEDGER_"),
    "api": ("services.allocator.reader", "ReaderSettings", "GPULEDGER_"),
}
SHARED = {shared_settings.NATS_URL_ENV, shared_settings.DATABASE_URL_ENV}
IMAGE_ONLY = {"GPULEDGER_HEALTHCHECK_URL"}
MIGRATE_READS = {shared_settings.DATABASE_URL_ENV}
NATS_SECURITY = {shared_settings.env_name(shared_settings.NATS_PREFIX, f.name)
                 for f in msgspec.structs.fields(shared_settings.NatsSecurity)}
"""Read by every service's NATS connection (services/shared/messaging.py)."""
API_AUTH = {"GPULEDGER_API_TOKEN", "GPULEDGER_API_TOKEN_FILE"}
"""The HTTP API's bearer token (services/allocator/http.py; the readers', the writer's probes are open)."""
HTTP_EDGE = {shared_settings.env_name(http_edge.PREFIX, f.name) for f in msgspec.structs.fields(http_edge.EdgeSettings)}
"""The HTTP edge's limits and Host allow-list, read by every HTTP server (services/shared/http_edge.py)."""
NATS_USERS = {"allocator": "allocator", "admission": "admission", "discovery": "discovery",
              "autoscaler": "autoscaler", "api": "api"}
"""The NATS user (deploy/base/auth.conf) each service logs in as."""
SECRET_PLACEHOLDER = "postgresql://gpuledger:secret@gpuledger-db-rw:5432/gpuledger"
COMPOSE_SECRET_HINT = "generate .env first (see docker-compose.yml)"


def _settings_class(service: str) -> tuple[type[msgspec.Struct], str]:
    module, name, prefix = SETTINGS[service]
    cls: type[msgspec.Struct] = getattr(importlib.import_module(module), name)
    return cls, prefix


def allowed_variables(service: str) -> set[str]:
    """The GPULEDGER_* variables ``service`` reads."""
    if service == "migrate":
        return MIGRATE_READS | IMAGE_ONLY | {shared_settings.NATS_URL_ENV} | NATS_SECURITY
    cls, prefix = _settings_class(service)
    fields = {f.name for f in msgspec.structs.fields(cls)}
    own = {shared_settings.env_name(prefix, f) for f in fields}
    shared = {v for v in SHARED if v.removeprefix("GPULEDGER_").lower() in fields}
    http = HTTP_EDGE if service in ("allocator", "admission", "api") else set()
    return own | shared | IMAGE_ONLY | NATS_SECURITY | http | (API_AUTH if service in ("allocator", "api") else set())


def _environments(rendered: dict[str, list[Obj]], *, secrets: bool = False) -> list[tuple[str, str, dict[str, str]]]:
    """(where, service, environment) of every gpuledger container in compose and the overlays; a secret
    reference reads as a placeholder database URL, or as ``secret:<name>/<key>`` with ``secrets``."""
    compose: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    found = [(f"compose {name}", s["command"][0], {k: str(v) for k, v in s.get("environment", {}).items()})
             for name, s in compose["services"].items() if s.get("image") == "gpuledger:dev"]
    for overlay in OVERLAYS:
        objects = rendered[overlay]
        for w in workloads(objects):
            spec = pod_spec(w)
            for c in spec.get("initContainers", []) + spec["containers"]:
                if c["image"].split(":")[0].endswith("gpuledger"):
                    env = {k: SECRET_PLACEHOLDER if v.startswith("secret:") and not secrets else v
                           for k, v in container_env(objects, c).items()}
                    found.append((f"{overlay} {w['metadata']['name']}/{c['name']}", c["args"][0], env))
    return found


def test_every_variable_set_is_read_by_its_service(rendered: dict[str, list[Obj]]) -> None:
    problems = []
    for where, service, env in _environments(rendered):
        unknown = {k for k in env if k.startswith("GPULEDGER_")} - allowed_variables(service)
        if unknown:
            problems.append(f"{where} ({service}): {sorted(unknown)} are not settings of services.{service}")
    assert not problems, "\n".join(problems)


def test_every_service_logs_in_to_nats_as_its_own_user_over_tls(rendered: dict[str, list[Obj]]) -> None:
    """Each service's container names its auth.conf user and takes that user's password from Secret
    gpuledger-nats-auth (compose: from .env), and the manifests verify the server's certificate."""
    for where, service, env in _environments(rendered, secrets=True):
        if service == "migrate":
            continue
        user = NATS_USERS[service]
        assert env.get("GPULEDGER_NATS_USER") == user, f"{where}: NATS user {env.get('GPULEDGER_NATS_USER')}"
        assert env.get("GPULEDGER_NATS_INBOX_PREFIX") == f"_INBOX_{user}", f"{where}: the inbox auth.conf allows"
        password = env.get("GPULEDGER_NATS_PASSWORD", "")
        if where.startswith("compose"):
            assert password == f"${{GPULEDGER_{user.upper()}_NATS_PASSWORD:?{COMPOSE_SECRET_HINT}}}", where
        else:
            assert password == f"secret:gpuledger-nats-auth/{user}", f"{where}: {password}"
            assert env.get("GPULEDGER_NATS_TLS_CA") == "/etc/gpuledger/nats-ca/ca.crt", where


def test_every_service_gets_the_urls_it_needs(rendered: dict[str, list[Obj]]) -> None:
    for where, service, env in _environments(rendered):
        assert shared_settings.NATS_URL_ENV in env or service == "migrate", f"{where}: no NATS URL"
        if service in ("allocator", "migrate"):
            assert shared_settings.DATABASE_URL_ENV in env, f"{where}: no database URL"


@pytest.mark.parametrize("service", sorted(SETTINGS))
def test_the_values_set_load_into_the_settings(rendered: dict[str, list[Obj]], service: str) -> None:
    cls, prefix = _settings_class(service)
    environments = [(w, env) for w, s, env in _environments(rendered) if s == service]
    assert environments, f"no deployment runs {service}"
    for where, env in environments:
        try:
            loaded = shared_settings.load(cls, prefix=prefix, environ=env, **_cli_overrides(service))
        except (shared_settings.SettingsError, msgspec.ValidationError) as exc:
            pytest.fail(f"{where}: {exc}")
        for name, value in env.items():
            field = name.removeprefix(prefix).lower()
            if name.startswith(prefix) and hasattr(loaded, field) and isinstance(getattr(loaded, field), str):
                assert getattr(loaded, field) == value, f"{where}: {name} was not read"


def _cli_overrides(service: str) -> dict[str, object]:
    """Settings the command line must supply (discovery's source comes from ``--source``)."""
    return {"source": "kubernetes"} if service == "discovery" else {}


def test_a_misplaced_variable_is_reported() -> None:
    assert "GPULEDGER_ADMISSION_PORT" not in allowed_variables("allocator")
    assert "GPULEDGER_HTTP_PORT" in allowed_variables("allocator")
    assert "GPULEDGER_DISCOVERY_NODE_NAME" in allowed_variables("discovery")


def test_the_database_urls_given_are_ones_the_allocator_accepts(rendered: dict[str, list[Obj]]) -> None:
    """Compose's URL and the dev Secret's ``uri`` (CloudNativePG writes the same postgresql:// form)."""
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    urls = {s["environment"]["GPULEDGER_DATABASE_URL"] for s in compose["services"].values()
            if "GPULEDGER_DATABASE_URL" in s.get("environment", {})}
    secret = next(o for o in rendered["dev"] if o["kind"] == "Secret" and o["metadata"]["name"] == "gpuledger-db-app")
    urls.add(base64.b64decode(secret["data"]["uri"]).decode())
    for url in {re.sub(r"\$\{\w+:\?[^}]*\}", "secret", url) for url in urls}:  # compose reads .env
        assert database.asyncpg_dsn(url).startswith("postgresql://"), url
        assert database.sqlalchemy_url(url).startswith("postgresql+psycopg://"), url
