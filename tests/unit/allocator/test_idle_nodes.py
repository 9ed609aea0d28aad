"""Idle nodes (TensorFusion GpuAllocator.ListNonUsingNodes): a node's ``idle_since`` is the time of the
event that left it without a granted allocation, None while one is granted.

A hypothesis state machine drives registrations, requests of every QoS (so preemptions happen),
releases, removals and heartbeat checks with a moving clock, and after every step compares each
node's ``idle_since`` with a brute-force recomputation from the whole event history: with no live
grant on it, the latest of its (re-)creating registration and the releases or preemptions of the
allocations once granted on it; the replayed and the snapshot-restored states equal the live one.
"""

from __future__ import annotations

from datetime import datetime

import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from events import decisions as ev
from events import intents as it
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.allocator.api.follower import Follower
from services.allocator.api.gauges import PoolCollector
from services.allocator.dashboard import pages, reads
from services.allocator.domain import decode_snapshot, digest, encode_snapshot
from services.allocator.domain.state import PROJECTION_VERSION, StaleSnapshot
from tests.unit.allocator.builders import T0, Cluster, Gi, a_gpu, a_request

NODES = ("n1", "n2", "n3")
UIDS = tuple(f"u{i}" for i in range(8))


def brute_idle_since(events: list[ev.AnyEvent]) -> dict[str, datetime | None]:
    """Every present node's idle_since, recomputed from the history alone: None when an allocation
    granted on it is still live, else the latest of its creating registration and the ends
    (release, preemption) of allocations that were granted on it."""
    created: dict[str, datetime] = {}
    ended: dict[str, list[datetime]] = {}
    placed: dict[str, str] = {}  # live granted allocation id -> node
    for e in events:
        if isinstance(e, ev.NodeRegistered) and e.node not in created:
            created[e.node], ended[e.node] = e.at, []
        elif isinstance(e, ev.NodeRemoved):
            created.pop(e.node, None)
            ended.pop(e.node, None)
        elif isinstance(e, ev.AllocationGranted):
            placed[e.spec.allocation_id] = e.node
        elif isinstance(e, ev.AllocationReleased | ev.AllocationPreempted):
            node = placed.pop(e.allocation_id, None)
            if node is not None and node in ended:
                ended[node].append(e.at)
    busy = set(placed.values())
    return {n: None if n in busy else max([created[n], *ended[n]]) for n in created}


class IdleMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.c = Cluster()

    @rule(node=st.sampled_from(NODES), pool=st.sampled_from(("a", "b")), n=st.integers(1, 2),
          ttl=st.sampled_from([0.0, 5.0]))
    def register(self, node: str, pool: str, n: int, ttl: float) -> None:
        self.c.node(node, pool, *(a_gpu(f"{node}-g{i}", 100, 16 * Gi, index=i) for i in range(n)), heartbeat_ttl_s=ttl)

    @rule(uid=st.sampled_from(UIDS), pool=st.sampled_from(("a", "b")), tflops=st.sampled_from([10, 60, 100]),
          count=st.integers(1, 2), qos=st.sampled_from(("critical", "high", "low")))
    def request(self, uid: str, pool: str, tflops: int, count: int, qos: str) -> None:
        self.c.request(a_request(uid, tflops, Gi, count=count, pool=pool, qos=qos))

    @rule(uid=st.sampled_from(UIDS))
    def release(self, uid: str) -> None:
        self.c.release(uid)

    @rule(node=st.sampled_from(NODES))
    def remove(self, node: str) -> None:
        self.c.send(it.RemoveNode(intent_id=f"rm-{len(self.c.events)}", node=node))

    @rule(seconds=st.sampled_from([1, 7, 600]))
    def tick_and_check_heartbeats(self, seconds: int) -> None:
        self.c.tick(seconds)
        self.c.send(it.CheckHeartbeats(intent_id=f"hb-{len(self.c.events)}"))

    @invariant()
    def idle_since_is_the_history_recomputed(self) -> None:
        live = {name: node.idle_since for name, node in self.c.state.nodes.items()}
        assert live == brute_idle_since(self.c.events)
        for node in self.c.state.nodes.values():
            assert (node.idle_since is None) == bool(node.workers)

    @invariant()
    def replay_and_snapshot_equal_live(self) -> None:
        assert self.c.replayed_digest() == digest(self.c.state)
        restored = decode_snapshot(encode_snapshot(self.c.state))
        assert {n: v.idle_since for n, v in restored.nodes.items()} == {
            n: v.idle_since for n, v in self.c.state.nodes.items()}


IdleMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow])
TestIdleProperties = IdleMachine.TestCase


def test_idle_since_follows_registration_grants_and_the_last_release() -> None:
    c = Cluster()
    c.node("n1", "p", a_gpu("n1-g0", 100, 16 * Gi))
    assert c.state.nodes["n1"].idle_since == T0
    c.tick(60)
    c.request(a_request("a", 40, Gi, pool="p"))
    c.request(a_request("b", 40, Gi, pool="p"))
    assert c.state.nodes["n1"].idle_since is None
    c.tick(60)
    c.release("a")
    assert c.state.nodes["n1"].idle_since is None  # b still holds a share
    c.tick(60)
    c.node("n1", "p", a_gpu("n1-g0", 100, 16 * Gi))  # a re-report changes nothing
    c.release("b")
    assert c.state.nodes["n1"].idle_since == c.now
    became = c.now
    c.tick(60)
    c.node("n1", "p", a_gpu("n1-g0", 100, 16 * Gi))  # nor does one while idle: it keeps its time
    assert c.state.nodes["n1"].idle_since == became


def test_a_snapshot_of_the_previous_projection_version_is_stale() -> None:
    """Nodes of a version-1 snapshot have no idle_since: such a snapshot is rebuilt from the log."""
    c = Cluster()
    c.node("n1", "p", a_gpu("n1-g0", 100, 16 * Gi))
    snapshot = c.state.to_snapshot()
    old = msgspec.msgpack.encode(msgspec.structs.replace(snapshot, version=PROJECTION_VERSION - 1))
    with pytest.raises(StaleSnapshot):
        decode_snapshot(old)


def test_gauges_and_dashboard_count_idle_nodes_and_gpus_per_pool() -> None:
    c = Cluster()
    c.node("n1", "p", a_gpu("n1-g0", 100, 16 * Gi, index=0), a_gpu("n1-g1", 100, 16 * Gi, index=1))
    c.node("n2", "p", a_gpu("n2-g0", 100, 16 * Gi))
    c.node("m1", "q", a_gpu("m1-g0", 100, 16 * Gi), a_gpu("m1-g1", 100, 16 * Gi, phase="Unknown"))
    c.request(a_request("a", 100, 16 * Gi, pool="p"))
    busy = c.state.allocations["a"].node
    samples = {(s.name, s.labels["pool"]): s.value for family in PoolCollector(lambda: c.state).collect()
               for s in family.samples if s.name.startswith("gpuledger_pool_idle_")}
    assert samples[("gpuledger_pool_idle_nodes", "p")] == 1
    assert samples[("gpuledger_pool_idle_nodes", "q")] == 1
    assert samples[("gpuledger_pool_idle_node_gpus", "p")] == (1 if busy == "n1" else 2)
    assert samples[("gpuledger_pool_idle_node_gpus", "q")] == 2
    assert samples[("gpuledger_pool_idle_gpus", "p")] == 2  # 3 GPUs, one held whole
    assert samples[("gpuledger_pool_idle_gpus", "q")] == 1  # the Unknown GPU left out
    p, q = reads.pools(c.state)
    assert (p.idle_nodes, q.idle_nodes) == (1, 1)
    c.release("a")
    assert reads.pools(c.state)[0].idle_nodes == 2


async def test_the_dashboard_shows_idle_nodes_per_pool_and_since_when() -> None:
    """The Cluster page's Idle nodes column and the Node page's idle since, rendered by the real
    dashboard over a projection (served by aiohttp's test server)."""
    c = Cluster()
    c.node("n1", "p", a_gpu("n1-g0", 100, 16 * Gi))
    c.node("n2", "p", a_gpu("n2-g0", 100, 16 * Gi))
    c.request(a_request("a", 100, 16 * Gi, pool="p"))
    busy = c.state.allocations["a"].node
    idle = "n2" if busy == "n1" else "n1"
    store = InMemoryEventStore(InMemoryLeaseStore())
    follower = Follower(store)
    follower.state = c.state
    app = web.Application()
    app.add_subapp("/ui", pages.build(follower, store, token=""))
    async with TestClient(TestServer(app)) as client:
        cluster = await (await client.get("/ui/")).text()
        row = cluster.split("<tbody>")[1].split("</tr>")[0]
        assert '<td class="idle-nodes">1</td>' in row and "Idle nodes</th>" in cluster
        idle_page = await (await client.get(f"/ui/nodes/{idle}")).text()
        assert f'<dd class="idle-since">{T0:%Y-%m-%d %H:%M:%S}</dd>' in idle_page
        busy_page = await (await client.get(f"/ui/nodes/{busy}")).text()
        assert '<dd class="idle-since">not idle (allocations granted)</dd>' in busy_page
