"""The HTTP edge of a real allocator (services/shared/http_edge.py): foreign Host 421, cross-site
writes 403, non-JSON bodies 415 (YAML only where a Pod is sent), a stalled body 408, connections
without a request head closed, the connection cap closing the oldest idle connection, and lone
surrogates in a body answered 400 naming the field on every route that takes a body."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
import yaml
from nats.js import JetStreamContext

from services.allocator import http
from tests.integration.service.factory import register_node, request
from tests.integration.service.harness import Replica, start_replica, until

from .conftest import Api, pod

pytestmark = pytest.mark.integration

EDGE_ENV = {"GPULEDGER_HTTP_HEADER_TIMEOUT_S": "1", "GPULEDGER_HTTP_BODY_TIMEOUT_S": "1",
            "GPULEDGER_HTTP_MAX_CONNECTIONS": "20", "GPULEDGER_HTTP_ALLOWED_HOSTS": "gpuledger-allocator,.svc.test"}


@pytest.fixture
async def replica(nats_url: str, database_url: str, jetstream: JetStreamContext,
                  monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Replica]:
    for name, value in EDGE_ENV.items():
        monkeypatch.setenv(name, value)
    running = await start_replica(nats_url, database_url=database_url)
    await until(lambda: running.allocator.keeper.is_leader, what="leadership")
    yield running
    await running.stop()


async def _raw(port: int, data: bytes, *, read: bool = True) -> bytes:
    """Send ``data`` on a fresh connection; the whole answer (until the server closes) or b""."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 20) if read else b""
    finally:
        writer.close()


async def test_a_foreign_host_is_refused_and_served_names_answer(api: Api) -> None:
    for host in ("attacker.example", "attacker.example:80", "127.0.0.1.attacker.example", "svc.test"):
        status, body = await api.send("GET", "/api/v1/allocations", headers={"Host": host})
        assert status == 421 and body["field"] == "Host", (host, body)
        status, body = await api.send("PUT", "/api/v1/quotas/team-a", {"total": {}}, headers={"Host": host})
        assert status == 421, (host, body)
    for host in ("127.0.0.1:1", "localhost:9", "[::1]:80", "10.2.3.4", "gpuledger-allocator:8480",
                 "a.ns.svc.test", "LOCALHOST"):
        status, body = await api.send("GET", "/api/v1/status", headers={"Host": host})
        assert status == 200, (host, body)


async def test_cross_site_writes_and_simple_content_types_are_refused(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1))
    text = json.dumps(pod("p1"))
    refusals = [
        ({"Content-Type": "text/plain", "Origin": "http://evil.example"}, 403, "Origin"),
        ({"Content-Type": "application/json", "Origin": "http://evil.example"}, 403, "Origin"),
        ({"Content-Type": "application/json", "Origin": "null"}, 403, "Origin"),
        ({"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, 403, "Sec-Fetch-Site"),
        ({"Content-Type": "application/json", "Sec-Fetch-Site": "same-site"}, 403, "Sec-Fetch-Site"),
        ({"Content-Type": "text/plain"}, 415, "Content-Type"),
        ({"Content-Type": "application/x-www-form-urlencoded"}, 415, "Content-Type"),
        ({"Content-Type": "multipart/form-data; boundary=x"}, 415, "Content-Type"),
    ]
    for headers, status, field in refusals:
        got, body = await api.send("POST", "/api/v1/allocations", data=text, headers=headers)
        assert (got, body["field"]) == (status, field), (headers, body)
    assert (await api.get("/api/v1/allocations"))[1]["items"] == []  # nothing was granted
    origin = api.base  # the reader that serves the API
    same = {"Content-Type": "application/json", "Origin": origin, "Sec-Fetch-Site": "same-origin"}
    got, body = await api.send("POST", "/api/v1/allocations", data=text, headers=same)
    assert got == 200 and body["type"] == "allocation_granted", body


async def test_yaml_only_where_a_pod_is_sent(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1))
    manifest = yaml.safe_dump(pod("p1"))
    status, body = await api.send("POST", "/api/v1/simulate", data=manifest,
                                  headers={"Content-Type": "application/yaml"})
    assert status == 200, body
    status, body = await api.send("PUT", "/api/v1/pools/default", data="placement: LowLoadFirst\n",
                                  headers={"Content-Type": "application/yaml"})
    assert status == 415 and body["field"] == "Content-Type" and "application/json" in body["error"]
    status, body = await api.send("DELETE", "/api/v1/quotas/team-a")  # no body, no Content-Type needed
    assert status != 415, body


async def test_a_stalled_body_is_answered_408_and_a_stalled_head_is_closed(api: Api) -> None:
    port = api.reader.port  # the reader serves the API (the writer only its probes)
    head = (b"POST /api/v1/simulate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n{")
    answer = await _raw(port, head)
    assert answer.startswith(b"HTTP/1.1 408") and b'"field": "body"' in answer, answer[:300]
    for stalled in (b"", b"GET /api/v1/sta", b"GET /api/v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: "):
        assert await _raw(port, stalled) == b""  # closed by the server (the read ends), no answer


async def test_at_the_cap_the_oldest_idle_connection_makes_room(api: Api) -> None:
    port = api.reader.port  # the reader serves the API (the writer only its probes)
    cap = int(EDGE_ENV["GPULEDGER_HTTP_MAX_CONNECTIONS"])
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(cap + 5)]
    try:
        status, body = await api.get("/api/v1/status")  # a fresh connection still answers
        assert status == 200, body
        oldest = held[0][0]
        assert await asyncio.wait_for(oldest.read(), 20) == b""  # it was closed to make room
    finally:
        for _, writer in held:
            writer.close()


SURROGATE = "\ud800"
BODIES: list[tuple[str, str, object, str]] = [
    ("PUT", "/api/v1/pools/default", {"placement": SURROGATE}, "placement"),
    ("POST", "/api/v1/pools/default/defrag", {"max_duration": SURROGATE}, "max_duration"),
    ("PUT", "/api/v1/quotas/team-a", {"total": {"max": {"tflops": {"request": SURROGATE}}}},
     "total.max.tflops.request"),
    ("POST", "/api/v1/allocations", {**pod("p1"), "metadata": {**pod("p1")["metadata"], "name": SURROGATE}},
     "metadata.name"),
    ("POST", "/api/v1/simulate", {**pod("p1"), "metadata": {**pod("p1")["metadata"], "annotations": {
        "tensor-fusion.ai/tflops-request": SURROGATE}}}, "metadata.annotations.tensor-fusion.ai/tflops-request"),
    ("POST", "/api/v1/allocations/team-a%2Fa/resize", {"request": {"tflops": SURROGATE}}, "request.tflops"),
    ("POST", "/api/v1/allocations/team-a/a/resize", {"request": {SURROGATE: "1"}}, "request.'\\ud800'"),
    ("POST", "/api/v1/whatif", {"since": "1h", "quota": ["a=1", SURROGATE]}, "quota[1]"),
    ("PUT", "/api/v1/shares/research", {"pools": [{"pool": "default", "guaranteed": {"vram": SURROGATE}}]},
     "pools[0].guaranteed.vram"),
]


async def test_a_lone_surrogate_in_any_body_is_400_naming_the_field(api: Api) -> None:
    await api.publish(register_node("n1", gpus=1), request("a", tflops=10))
    routes_with_bodies = {(m, p) for m, p, _ in http.ROUTES if m in ("POST", "PUT")}
    covered = set()
    for method, path, body, field in BODIES:
        text = json.dumps(body)  # ensure_ascii: the surrogate travels as the JSON escape \ud800
        assert "\\ud800" in text
        status, answer = await api.send(method, path, data=text, headers={"Content-Type": "application/json"})
        assert status == 400 and answer["field"] == field and "surrogate" in answer["error"], (path, answer)
        covered |= {(m, p) for m, p in routes_with_bodies if m == method and _matches(p, path)}
    assert covered == routes_with_bodies


def _matches(template: str, path: str) -> bool:
    parts, given = template.split("/"), path.split("/")
    return len(parts) == len(given) and all(a == b or a.startswith("{") for a, b in zip(parts, given, strict=True))
