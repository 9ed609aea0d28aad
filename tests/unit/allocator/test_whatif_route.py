"""``POST /api/v1/whatif`` on a reader app over the in-memory log: the report, and its refusals
(400 naming the field, 422 past the intent bound, 429 while another runs)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from services.allocator import http
from services.allocator.api.follower import Follower
from services.allocator.api.whatif import route
from tests.unit.allocator.whatif_history import Recorder, history

Client = TestClient[web.Request, web.Application]


@pytest.fixture
def recorded() -> Recorder:
    return history(5, strategy="fgd", steps=80)  # decided outside the test's event loop (it runs its own)


@pytest.fixture
async def client(recorded: Recorder) -> AsyncIterator[Client]:
    app = http.build_app(Follower(recorded.store), recorded.store)
    async with TestClient(TestServer(app)) as running:
        yield running


def _route() -> route.WhatIfRoute:
    (handler,) = [h for m, p, h in http.ROUTES if (m, p) == ("POST", "/api/v1/whatif")]
    owner = getattr(handler, "__self__", None)
    assert isinstance(owner, route.WhatIfRoute)
    return owner


async def test_the_report_over_the_readers_log(client: Client) -> None:
    answer = await client.post("/api/v1/whatif", json={"since": "2026-01-01T00:01:00Z", "pool": "p",
                                                       "strategy": ["fgd", "best-fit"], "preemption": "off"})
    assert answer.status == 200, await answer.text()
    report = await answer.json()
    assert report["fairness"]["mismatches"] == 0 and report["intents"] > 20
    assert [r["name"] for r in report["runs"]] == ["baseline", "strategy=fgd preemption=off",
                                                   "strategy=best-fit preemption=off"]
    assert report["runs"][0]["series"][0][0] == 0.0


@pytest.mark.parametrize(("body", "field"), [
    ({"since": "last week"}, "since"), ({"strategy": "fastest"}, "strategy"), ({"strategy": 3}, "strategy"),
    ({"quota": ["team-a"]}, "quota"), ({"nodes": ["+1:H100"]}, "nodes"), ({"pool": "Bad_Pool"}, "pool"),
    ({"since": "2h", "until": "3h"}, "until"), ({"window": "1h"}, "body.window"),
])
async def test_bad_bodies_are_400_naming_the_field(client: Client, body: dict[str, object], field: str) -> None:
    answer = await client.post("/api/v1/whatif", json={"since": "2026-01-01T00:00:00Z", **body})
    assert answer.status == 400, await answer.text()
    assert (await answer.json())["field"] == field


async def test_the_window_bound_and_one_at_a_time(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(route, "MAX_INTENTS", 10)
    answer = await client.post("/api/v1/whatif", json={"since": "2026-01-01T00:00:00Z"})
    assert answer.status == 422 and "more than 10 intents" in (await answer.json())["error"]
    owner = _route()
    owner.running = True
    try:
        answer = await client.post("/api/v1/whatif", json={})
        assert answer.status == 429
    finally:
        owner.running = False
    after = await client.post("/api/v1/whatif", json={"since": "2030-01-01T00:00:00Z", "pool": "p"})
    assert after.status == 200 and (await after.json())["intents"] == 0  # the guard was let go
