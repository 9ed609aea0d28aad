"""The dashboard's Defrag page (services/allocator/dashboard/pages.py ``defrag``) on a real aiohttp
server over a projection: the plan (dry run) of each pool, a running campaign's reserved moves, a
closed one's outcome, and a bad query answered 400 naming the field."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from events import intents as it
from services.allocator.dashboard import pages
from tests.unit.allocator.builders import Cluster, three_half_used_nodes


@pytest.fixture
async def served() -> AsyncIterator[tuple[Cluster, TestClient[web.Request, web.Application]]]:
    c = three_half_used_nodes()
    app = web.Application(middlewares=[pages._problems])
    app[pages.FOLLOWER] = SimpleNamespace(state=c.state)  # type: ignore[assignment]  # only .state is read
    app.router.add_get("/ui/defrag", pages.defrag)
    async with TestClient(TestServer(app)) as client:
        yield c, client


async def _text(client: TestClient[web.Request, web.Application], **query: Any) -> tuple[int, str]:
    answer = await client.get("/ui/defrag", params=query)
    return answer.status, await answer.text()


async def test_the_plan_then_a_running_campaign_then_its_outcome(
        served: tuple[Cluster, TestClient[web.Request, web.Application]]) -> None:
    c, client = served
    status, text = await _text(client)
    assert status == 200 and "No campaign has run in this pool." in text
    assert "Empties 2 node(s) (n0, n2)" in text and "move default/a0 (a0, priority 0) from n0" in text
    c.send(it.StartDefrag(intent_id="campaign-1", pool="p", trigger="cli"))
    status, text = await _text(client, pool="p")
    assert status == 200 and "Campaign <code>campaign-1</code>" in text and "running" in text
    assert 'class="defrag-open"' in text and "2 planned, 0 completed, 0 cancelled, 2 open" in text
    spec = c.state.allocations["a0"].spec
    c.send(it.RequestAllocation(intent_id="r", spec=msgspec.structs.replace(spec, allocation_id="a0-r", pod="a0-r")))
    c.send(it.CancelDefrag(intent_id="stop", pool="p", reason="enough for today"))
    status, text = await _text(client, pool="p", max_moves="1")
    assert "ended" in text and "(cancelled)" in text and "enough for today" in text
    assert '<a href="/ui/allocations/a0-r">a0-r</a>' in text and "cancelled: enough for today" in text
    assert "at most 1 moves" in text


async def test_bad_query_values_are_400_naming_the_field(
        served: tuple[Cluster, TestClient[web.Request, web.Application]]) -> None:
    _, client = served
    for query, field in (({"pool": "nowhere"}, "pool"), ({"max_moves": "0"}, "max_moves"),
                         ({"max_moves": "many"}, "max_moves")):
        status, text = await _text(client, **query)
        assert status == 400 and field in text, (query, text)
