"""The Scheduler's node index (domain/index.py) against its free classes (hypothesis).

The index keeps each pool's node keys once per free class (the placement walks the classes a
request may fit) and once in one list for the whole pool (preemption walks every node in order):
after any grants, releases, node moves and removals, and in a copy, the whole-pool order must be
the classes' keys merged, one key per node of the pool.
"""

from __future__ import annotations

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from events import intents as it
from events.values import AllocationSpec, Resources
from services.allocator.domain.index import NodeIndex
from tests.unit.allocator.builders import Cluster, Gi, a_gpu

STEPS = st.lists(st.tuples(st.sampled_from(["grant", "grant", "release", "move", "remove"]), st.integers(0, 5),
                           st.sampled_from([10_000, 40_000, 90_000])), max_size=30)


def merged(index: NodeIndex, pool: str) -> list[str]:
    """The pool's node names by merging its free classes (the order the placement walks use)."""
    entry = index._pools.get(pool)
    return [] if entry is None else [name for _, name in heapq.merge(*entry.classes)]


@given(steps=STEPS)
@settings(max_examples=150, deadline=None)
def test_the_whole_pool_order_is_the_free_classes_merged(steps: list[tuple[str, int, int]]) -> None:
    c = Cluster()
    c.pool("p")
    c.pool("q")
    for k in range(6):
        c.node(f"n{k}", "p", *(a_gpu(f"n{k}-g{i}", 100, 16 * Gi, index=i) for i in range(2)), cpu_milli=8000)
    for n, (step, k, tflops) in enumerate(steps):
        if step == "grant":
            amount = Resources(milli_tflops=tflops, vram_bytes=Gi)
            c.request(AllocationSpec(allocation_id=f"a{n}", namespace="x", pod=f"a{n}", pool="p", request=amount,
                                     limit=amount))
        elif step == "release":
            granted = sorted(a for a, s in c.state.allocations.items() if s.status == "granted")
            if granted:
                c.release(granted[k % len(granted)])
        elif f"n{k}" in c.state.nodes and not c.state.nodes[f"n{k}"].workers:
            if step == "move":
                c.node(f"n{k}", "q", *(a_gpu(f"n{k}-g{i}", 100, 16 * Gi, index=i) for i in range(2)), cpu_milli=8000)
            else:
                c.send(it.RemoveNode(intent_id=f"rm{n}", node=f"n{k}"))
        c.scheduler.sync(c.state)
        for index in (c.scheduler.index, c.scheduler.index.copy()):
            for pool in ("p", "q"):
                names = sorted((n for n in c.state.pool_nodes.get(pool, ()) if n in c.state.nodes),
                               key=index.sort_key)
                assert list(index.ordered(pool)) == merged(index, pool) == names
                assert index.sort_keys(pool) == [index.sort_key(n) for n in names]
