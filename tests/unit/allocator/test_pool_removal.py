"""RemovePool: a configured pool without nodes or live allocations goes (and stops being listed);
otherwise the refusal names what holds it, and nothing changes."""

from __future__ import annotations

from events import decisions as ev
from events import intents as it
from services.allocator.api.documents import pool_names
from services.allocator.domain import digest
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_request


def _remove(c: Cluster, pool: str) -> ev.AnyEvent:
    [event] = c.send(it.RemovePool(intent_id=f"unpool-{pool}-{len(c.events)}", pool=pool))
    return event


def test_a_typo_pool_can_be_removed_and_is_no_longer_listed() -> None:
    c = Cluster()
    c.node("node-1", "default", a_gpu("gpu-1", 100, 16 * Gi))
    c.pool("defualt", placement="best-fit")
    assert "defualt" in pool_names(c.state)
    assert _remove(c, "defualt") == ev.PoolRemoved(at=c.now, pool="defualt")
    assert pool_names(c.state) == ["default"] and "defualt" not in c.state.pools
    again = _remove(c, "defualt")
    assert isinstance(again, ev.IntentRejected) and again.field == "pool"
    assert "no configuration to remove" in again.reason


def test_a_pool_with_nodes_names_them() -> None:
    c = Cluster()
    c.pool("train", placement="best-fit")
    c.node("node-1", "train", a_gpu("gpu-1", 100, 16 * Gi))
    refused = _remove(c, "train")
    assert isinstance(refused, ev.IntentRejected) and refused.intent_type == "remove_pool"
    assert "node-1" in refused.reason and "remove them first" in refused.reason
    assert "train" in c.state.pools


def test_a_pool_with_a_live_allocation_names_it() -> None:
    c = Cluster()
    c.pool("train", placement="best-fit")
    c.node("node-1", "train", a_gpu("gpu-1", 100, 16 * Gi))
    assert isinstance(c.request(a_request("job-1", 100, Gi, pool="train")), ev.AllocationGranted)
    assert isinstance(c.request(a_request("job-2", 100, Gi, pool="train")), ev.AllocationQueued)
    c.send(it.RemoveNode(intent_id="gone", node="node-1"))  # job-1 is released with it; job-2 still waits
    assert [a.spec.allocation_id for a in c.state.allocations.values()] == ["job-2"]
    refused = _remove(c, "train")
    assert isinstance(refused, ev.IntentRejected) and "job-2" in refused.reason
    c.release("job-2")
    assert isinstance(_remove(c, "train"), ev.PoolRemoved)


def test_removal_replays_to_the_same_state() -> None:
    c = Cluster()
    c.pool("a", placement="best-fit")
    c.pool("b", placement="best-fit")
    _remove(c, "a")
    assert c.replayed_digest() == digest(c.state)
