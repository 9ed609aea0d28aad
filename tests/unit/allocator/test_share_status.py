"""Share figures (services.allocator.api.share_status), their API document and gauges, on a pool of
8 GPUs (100 TFLOPS, 80 GiB each): department ``dept`` (5 GPUs, 500 TFLOPS) parenting ``a`` (3 GPUs,
300 TFLOPS) and ``b`` (2 GPUs, 200 TFLOPS, lends at most 1 GPU), and ``c`` (2 GPUs, 200 TFLOPS,
weight 3) which holds 4 GPUs, granted as borrowed. Every figure is worked out by hand below from
docs/shares.md's definitions."""

from __future__ import annotations

from fractions import Fraction as F

import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from events import decisions as ev
from events.values import ShareAmount
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.allocator.api import documents, share_status
from services.allocator.api.follower import Follower
from services.allocator.api.share_gauges import ShareCollector
from services.allocator.dashboard import pages, reads
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_request, a_share, tf

POOL = "p"


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    c = Cluster()
    for node in ("n1", "n2"):
        c.node(node, POOL, *(a_gpu(f"{node}-g{i}", 100, 80 * Gi) for i in range(4)))
    c.share("dept", a_share(pool=POOL, gpus=5, tflops=500))
    c.share("a", a_share("ns-a", pool=POOL, gpus=3, tflops=300, parent="dept"))
    c.share("b", a_share("ns-b", pool=POOL, gpus=2, tflops=200, parent="dept", lend=ShareAmount(gpus=1)))
    c.share("c", a_share("ns-c", pool=POOL, gpus=2, tflops=200, weight=3))
    c.share("elsewhere", a_share("ns-x", pool="q", gpus=1))
    assert isinstance(c.request(a_request("a1", 50, 40 * Gi, ns="ns-a", pool=POOL)), ev.AllocationGranted)
    borrowing = c.request(a_request("c1", 100, 80 * Gi, count=4, ns="ns-c", pool=POOL))
    assert isinstance(borrowing, ev.AllocationGranted) and borrowing.borrowed  # 4 GPUs against a guarantee of 2
    assert isinstance(c.request(a_request("b1", 100, 80 * Gi, count=4, ns="ns-b", pool=POOL)), ev.AllocationQueued)
    return c


def _by_share(cluster: Cluster) -> dict[str, share_status.PoolFigures]:
    totals, figures = share_status.pool_figures(cluster.state, POOL)
    assert totals.capacity == (tf(800), 640 * Gi, 8)
    assert totals.surplus == (tf(100), 640 * Gi, 1)  # 800 - (500 + 200) TFLOPS; no VRAM guaranteed
    return {f.share: f for f in figures}


def test_used_and_borrowed_come_from_the_projection(cluster: Cluster) -> None:
    got = _by_share(cluster)
    assert list(got) == ["c", "dept", "a", "b"]  # top-level shares by name, each parent before its children
    assert got["a"].used == (tf(50), 40 * Gi, 1) and got["a"].borrowed == share_status.ZERO
    assert got["c"].used == got["c"].borrowed == (tf(400), 320 * Gi, 4)
    assert got["dept"].used == (tf(50), 40 * Gi, 1)  # its children's sum
    assert got["b"].waiting == 1 and got["dept"].waiting == 1 and got["a"].waiting == 0
    assert got["b"].below == ("milli_tflops", "gpus") and got["c"].below == ()
    # above: as borrowing judges a grant, only the resources the guarantee sets (c guarantees no VRAM)
    assert got["c"].above == ("milli_tflops", "gpus") and got["a"].above == got["dept"].above == ()


def test_lent_splits_the_borrowing_beyond_the_surplus_over_what_each_can_lend(cluster: Cluster) -> None:
    got = _by_share(cluster)
    # borrowed beyond the surplus D = (400 - 100 TFLOPS, 0 VRAM, 4 - 1 GPUs); lendable: a (250, 0, 2),
    # b (200, 0, min(2, lending limit 1)); Σ (450, 0, 3): a lends 2/3 of its TFLOPS and all its GPUs
    assert got["a"].lent == (F(tf(250) * 2, 3), 0, 2)
    assert got["b"].lent == (F(tf(200) * 2, 3), 0, 1)
    assert got["dept"].lent == (tf(300), 0, 3) and got["c"].lent == share_status.ZERO


def test_fair_share_is_the_guarantee_plus_a_weighted_part_of_the_surplus(cluster: Cluster) -> None:
    got = _by_share(cluster)
    assert got["dept"].fair == (tf(525), 160 * Gi, F(21, 4))  # + 1/4 of (100 TFLOPS, 640 GiB, 1 GPU)
    assert got["c"].fair == (tf(275), 480 * Gi, F(11, 4))  # weight 3: + 3/4
    # the children split what dept's fair share leaves beyond their guarantees: (25 TFLOPS, 160 GiB, 1/4)
    assert got["a"].fair == (tf(312.5), 80 * Gi, F(25, 8))
    assert got["b"].fair == (tf(212.5), 80 * Gi, F(17, 8))


def test_share_document_rounds_down_and_names_parent_and_children(cluster: Cluster) -> None:
    state = cluster.state
    figures = share_status.all_figures(state)
    assert figures["elsewhere"][0].pool == "q" and figures["elsewhere"][0].fair == (0, 0, 1)  # q has no GPU
    doc = documents.share_doc(state, "a", figures["a"])
    assert doc["parent"] == "dept" and doc["children"] == [] and doc["namespaces"] == ["ns-a"]
    assert documents.share_doc(state, "dept", figures["dept"])["children"] == ["a", "b"]
    (pool,) = doc["pools"]
    assert pool["guaranteed"] == {"tflops": "300", "vram": "0", "gpus": 3}
    assert pool["lent"] == {"tflops": "166666m", "vram": "0", "gpus": 2}
    assert pool["fair_share"] == {"tflops": "312500m", "vram": "80Gi", "gpus": 3.12}
    assert pool["borrowing_limit"] is None and pool["lending_limit"] is None
    assert (pool["below_guarantee"], pool["above_guarantee"]) == (["milli_tflops", "gpus"], [])
    assert pool["standing"] == "below"
    (borrowing,) = documents.share_doc(state, "c", figures["c"])["pools"]
    assert (borrowing["above_guarantee"], borrowing["standing"]) == (["milli_tflops", "gpus"], "over")
    assert documents.standing(msgspec.structs.replace(figures["a"][0], below=())) == "at"
    assert documents.standing(msgspec.structs.replace(figures["c"][0], below=("vram_bytes",))) == "over"
    assert doc["spec"]["pools"][0]["guaranteed"] == {"tflops": "300", "vram": None, "gpus": 3}
    summary = documents.summary(state)["shares"]
    assert [(s["share"], s["pool"]) for s in summary] == [
        ("a", "p"), ("b", "p"), ("c", "p"), ("dept", "p"), ("elsewhere", "q")]


def test_gauges_per_share_pool_and_resource(cluster: Cluster) -> None:
    registry = CollectorRegistry()
    registry.register(ShareCollector(lambda: cluster.state))
    text = generate_latest(registry).decode()
    assert 'gpuledger_share_borrowed_gpus{pool="p",share="c"} 4.0' in text
    assert 'gpuledger_share_lent_tflops{pool="p",share="dept"} 300.0' in text
    assert 'gpuledger_share_fair_gpus{pool="p",share="c"} 2.75' in text
    assert 'gpuledger_share_guaranteed_vram_bytes{pool="p",share="a"} 0.0' in text
    assert 'gpuledger_share_waiting{pool="p",share="b"} 1.0' in text


def test_a_pool_without_shares_has_no_figures() -> None:
    c = Cluster()
    c.node("n1", POOL, a_gpu("g0", 100, 80 * Gi))
    assert share_status.all_figures(c.state) == {}
    assert share_status.pool_figures(c.state, POOL)[1] == []
    assert documents.summary(c.state)["shares"] == []


async def test_the_dashboard_shares_page_shows_each_share_per_pool(cluster: Cluster) -> None:
    """/ui/shares rendered by the real dashboard over the projection (aiohttp's test server)."""
    rows = reads.shares(cluster.state)
    assert [(r.pool, r.share) for r in rows] == [("p", "c"), ("p", "dept"), ("p", "a"), ("p", "b"), ("q", "elsewhere")]
    assert rows[0].held_pct == 200.0 and rows[2].held_pct == pytest.approx(100 / 3)  # GPUs 1/3 beat TFLOPS 50/300
    store = InMemoryEventStore(InMemoryLeaseStore())
    follower = Follower(store)
    follower.state = cluster.state
    app = web.Application()
    app.add_subapp("/ui", pages.build(follower, store, token=""))
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/ui/shares")
        html = await response.text()
    assert response.status == 200 and '<a href="/ui/shares" class="on">Shares</a>' in html
    body = html.split("<tbody>")[1]
    assert body.count('<tr class="share') == 5 and body.count('<tr class="share child">') == 2
    assert "dept / <b>a</b>" in body and 'class="over"' in body and 'class="under"' in body
    assert '<td class="borrowed">400.0 TFLOPS · 320.0 GiB · 4 GPUs</td>' in body


@st.composite
def _stories(draw: st.DrawFn) -> Cluster:
    """A pool of 1-8 GPUs, a department parenting 1-2 teams plus 1-2 top-level shares (random
    guarantees, weights, lending limits), and random requests of their namespaces and of one in no share."""
    c = Cluster()
    c.node("n1", POOL, *(a_gpu(f"g{i}", 100, 80 * Gi) for i in range(draw(st.integers(1, 8)))))
    gpus = st.integers(0, 4)
    team_gpus = [draw(gpus) for _ in range(draw(st.integers(1, 2)))]
    c.share("dept", a_share(pool=POOL, gpus=sum(team_gpus) + draw(st.integers(0, 2))))
    leaves = [f"t{i}" for i in range(len(team_gpus))] + [f"s{i}" for i in range(draw(st.integers(1, 2)))]
    for i, name in enumerate(leaves):
        team = name.startswith("t")  # a team's guarantee stays within the department's (GPUs only)
        guaranteed = team_gpus[i] if team else draw(gpus)
        lend = draw(st.none() | st.builds(ShareAmount, gpus=st.integers(0, guaranteed)))  # lends at most its own
        spec = a_share(f"ns-{name}", pool=POOL, gpus=guaranteed,
                       tflops=None if team else draw(st.none() | st.sampled_from([50.0, 200.0])),
                       weight=draw(st.integers(1, 5)), lend=lend, parent="dept" if team else "")
        assert isinstance(c.share(name, spec)[0], ev.ShareSet)
    for n in range(draw(st.integers(0, 10))):
        ns = draw(st.sampled_from([f"ns-{name}" for name in leaves] + ["ns-none"]))
        c.request(a_request(f"r{n}", draw(st.sampled_from([25, 100])), 10 * Gi, count=draw(st.integers(1, 3)), ns=ns,
                            pool=POOL))
    return c


@given(_stories())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_figures_keep_their_definitions(c: Cluster) -> None:
    totals, figures = share_status.pool_figures(c.state, POOL)
    by = {f.share: f for f in figures}
    tops = [n for n in by if not c.state.shares[n].parent]
    for r in range(3):
        assert sum(by[t].fair[r] for t in tops) == max(totals.capacity[r], totals.reserved[r])
        children = [by[n] for n in by if c.state.shares[n].parent == "dept"]
        left = by["dept"].fair[r] - sum(k.guaranteed[r] for k in children)
        assert sum(k.fair[r] for k in children) == sum(k.guaranteed[r] for k in children) + max(F(0), left)
        beyond = max(F(0), totals.borrowed[r] - totals.surplus[r])
        assert sum(f.lent[r] for f in figures if f.share != "dept" and c.state.shares[f.share].parent) + sum(
            by[t].lent[r] for t in tops if t != "dept") <= beyond
        for f in figures:
            assert f.fair[r] >= f.guaranteed[r] and 0 <= f.borrowed[r] <= f.used[r]
            assert 0 <= f.lent[r] <= max(F(0), f.guaranteed[r] - f.used[r]) or f.share == "dept"
            limit = f.terms.lending_limit
            if limit is not None and r == 2 and limit.gpus is not None:
                assert f.lent[r] <= limit.gpus
