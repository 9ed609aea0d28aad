"""Authentication and input bounds of the allocator API: 401 without the token, 413 past 1 MiB,
415 for a foreign charset, 400 for non-UTF-8, alias bombs and deep nesting; never a 5xx."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from nats.js import JetStreamContext

from services.allocator import http
from services.allocator.api import bounds
from tests.integration.service.harness import Replica, start_reader, start_replica, until

from .conftest import Api, pod

pytestmark = pytest.mark.integration

TOKEN = "s3cret-token-for-tests"
ALIAS_BOMB = "\n".join(["a: &a [x, x, x, x, x, x, x, x, x]"]
                       + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
                       + ["metadata: *i"])


@pytest.fixture
async def guarded(nats_url: str, database_url: str, jetstream: JetStreamContext,
                  monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Api]:
    monkeypatch.setenv(http.TOKEN_ENV, TOKEN)
    running: Replica = await start_replica(nats_url, database_url=database_url)
    await until(lambda: running.allocator.keeper.is_leader, what="leadership")
    reader = await start_reader(nats_url, database_url=database_url)
    try:
        async with aiohttp.ClientSession() as session:
            yield Api(session, running, reader, jetstream)
    finally:
        await reader.stop()
        await running.stop()


async def test_every_api_route_needs_the_token_and_probes_stay_open(guarded: Api) -> None:
    for method, path, _ in http.ROUTES:
        concrete = path.replace("{pool}", "p").replace("{name}", "n").replace("{id}", "i").replace("{namespace}", "ns")
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            async with guarded.session.request(method, guarded.base + concrete, headers=headers) as r:
                expected = 401 if path.startswith("/api/") else 200
                assert r.status == expected, (method, path, headers, r.status)
    status, body = await guarded.get("/api/v1/status")
    assert status == 401 and body["field"] == "Authorization"
    for sneaky in ("/%61pi/v1/status", "/api/v1/../v1/status", "/nothing", "/api"):
        async with guarded.session.get(guarded.base + sneaky) as r:
            assert r.status == 401, sneaky
    async with guarded.session.get(guarded.base + "/api/v1/status",
                                   headers={"Authorization": f"Bearer {TOKEN}"}) as r:
        assert r.status == 200 and "pools" in await r.json()


def test_the_token_may_come_from_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text(f"{TOKEN}\n")
    assert http.token_from_env({http.TOKEN_FILE_ENV: str(secret)}) == TOKEN
    assert http.token_from_env({}) == ""
    with pytest.raises(ValueError, match="both"):
        http.token_from_env({http.TOKEN_ENV: "a", http.TOKEN_FILE_ENV: str(secret)})
    with pytest.raises(ValueError, match="cannot read"):
        http.token_from_env({http.TOKEN_FILE_ENV: str(tmp_path / "missing")})


JSON, YAML = {"Content-Type": "application/json"}, {"Content-Type": "application/yaml"}


@pytest.mark.parametrize("path", ["/api/v1/simulate", "/api/v1/allocations"])
async def test_hostile_bodies_are_refused_with_4xx(api: Api, path: str) -> None:
    big = json.dumps({**pod("p"), "padding": "x" * (bounds.MAX_BODY_BYTES + 10)})
    cases: list[tuple[bytes | str, dict[str, str], int, str]] = [
        (big, {"Content-Type": "application/json"}, 413, "body"),
        ('{"metadata": {"name": "\xe9t\xe9"}}'.encode("latin-1"), {"Content-Type": "application/json"}, 400, "body"),
        (json.dumps(pod("p")), {"Content-Type": "application/json; charset=bogus"}, 415, "Content-Type"),
        (ALIAS_BOMB, {"Content-Type": "application/yaml"}, 400, "body"),
        ("[" * 50_000 + "]" * 50_000, {"Content-Type": "application/json"}, 400, "body"),
        ("a:\n" + "".join("  " * i + "- \n" for i in range(1, 200)), YAML, 400, "body"),
        ("[1, 2]", JSON, 400, "body"), ("{", JSON, 400, "body"), ("\x00", JSON, 400, "body"),
        (json.dumps(pod("p", tflops="1e999999999")), JSON, 400, ""),  # the field: the pod parser's (or body)
    ]
    for data, headers, status, field in cases:
        got, body = await api.send("POST", path, data=data, headers=headers)
        assert got == status and body["error"] and (body["field"] == field or not field), (str(data)[:80], body)


async def test_unknown_routes_and_methods_are_json_4xx(api: Api) -> None:
    got, body = await api.send("GET", "/api/v1/nothing")
    assert got == 404 and "error" in body
    got, body = await api.send("PATCH", "/api/v1/pools")
    assert got == 405 and "error" in body
