"""services.allocator.dashboard.recent: a page rendered for the same path and query within a second
is answered again (N viewers cost one render); older, another query, or a failure renders afresh."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.allocator.api.follower import Follower
from services.allocator.dashboard import pages
from services.allocator.dashboard.recent import RecentPages
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_request


def _cluster() -> Cluster:
    c = Cluster()
    c.node("n1", "p", a_gpu("n1-g0", 100, 16 * Gi))
    return c


async def test_the_cluster_page_is_rendered_once_a_second_per_query() -> None:
    c = _cluster()
    store = InMemoryEventStore(InMemoryLeaseStore())
    follower = Follower(store)
    follower.state = c.state
    dashboard = pages.build(follower, store, token="")
    now = [100.0]
    dashboard[pages.RECENT].clock = lambda: now[0]
    app = web.Application()
    app.add_subapp("/ui", dashboard)
    recent = dashboard[pages.RECENT]
    async with TestClient(TestServer(app)) as client:
        first = await client.get("/ui/")
        body = await first.text()
        assert first.status == 200 and first.headers["Content-Type"].startswith("text/html")
        c.request(a_request("a1", 50, Gi, pool="p"))  # the projection moves on
        now[0] += 0.5
        again = await client.get("/ui/")
        assert await again.text() == body and recent.renders == 1  # half a second later: the same page
        assert again.headers.get("Content-Security-Policy") == first.headers.get("Content-Security-Policy")
        other = await client.get("/ui/?pool=p")
        assert await other.text() != body and recent.renders == 2  # another query: its own render
        now[0] += 0.6
        fresh = await client.get("/ui/")
        assert await fresh.text() != body and recent.renders == 3  # over a second: rendered anew
        bad = await client.get("/ui/?show=nonsense")
        assert bad.status == 400
        await client.get("/ui/?show=nonsense")
        assert recent.renders == 5  # a refusal is never kept


async def test_recent_pages_are_bounded() -> None:
    recent = RecentPages(max_pages=2, clock=lambda: 0.0)

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=request.path_qs)

    app = web.Application()
    app.router.add_get("/p", recent.serving(page))
    async with TestClient(TestServer(app)) as client:
        for query in ("a", "b", "c", "a"):
            assert await (await client.get(f"/p?q={query}")).text() == f"/p?q={query}"
        assert recent.renders == 4  # the third page cleared the first two: "a" rendered again
