"""The intent each recorded decision answered, rebuilt from its events.

The log holds events, not intents; the events one intent produced are consecutive and carry its
``intent_id`` (``ports.StoredEvent``), and the first of them is its outcome (``domain.decide``: the
intent's own events first, then the grants of the queue drain). From that group:

- AllocationGranted (``from_queue`` false) / AllocationQueued / AllocationRejected, possibly after
  the AllocationPreempted of its victims or among a gang's grants: RequestAllocation of that spec;
- NodeRemoved anywhere in the group: RemoveNode (its allocations' releases come first);
- AllocationReleased: ReleaseAllocation (its reason kept);
- AllocationResized / ResizeRejected: ResizeAllocation with the asked request and limit;
- NodeRegistered: RegisterNode with the full description it records; NodeHeartbeat: RegisterNode
  with the node's last description (:class:`Descriptions`);
- HeartbeatsChecked: CheckHeartbeats; QuotaSet / QuotaRemoved / PoolConfigured / PoolRemoved /
  ShareSet / ShareRemoved: the intent of the same name.

An IntentRejected outcome (malformed or invalid input) changed nothing and is not replayed (None).
"""

from __future__ import annotations

from collections.abc import Sequence

from events import decisions as ev
from events import intents as it
from services.allocator.domain.model import MISSING
from services.allocator.domain.state import ClusterState


class Descriptions:
    """Each node's last full description (a RegisterNode), to rebuild the heartbeats: from the state
    at the window's start, then every NodeRegistered of the window."""

    def __init__(self, state: ClusterState) -> None:
        self.nodes: dict[str, it.RegisterNode] = {}
        for node in state.nodes.values():
            gpus = tuple(state.gpus[g].spec for g in node.gpus if g in state.gpus and state.gpus[g].phase != MISSING)
            self.nodes[node.name] = it.RegisterNode(
                intent_id="-", node=node.name, pool=node.pool, gpus=gpus, labels=node.labels,
                cpu_milli=node.cpu_milli, memory_bytes=node.memory_bytes, schedulable=node.schedulable,
                heartbeat_ttl_s=node.heartbeat_ttl_s, source=node.source)

    def learn(self, intent: it.RegisterNode) -> None:
        """Remember ``intent`` as its node's description."""
        self.nodes[intent.node] = intent

    def forget(self, node: str) -> None:
        """The node was removed."""
        self.nodes.pop(node, None)


def reconstruct(intent_id: str, events: Sequence[ev.AnyEvent], known: Descriptions) -> it.AnyIntent | None:
    """The intent that produced ``events`` (one intent's events, in log order), or None when it was
    rejected as malformed (nothing to replay) or its kind cannot be told (never for a log written by
    ``domain.process``). Updates ``known`` with a node registration or removal."""
    for event in events:
        if isinstance(event, ev.NodeRemoved):
            known.forget(event.node)
            return it.RemoveNode(intent_id=intent_id, node=event.node, pool=event.pool)
    first = events[0] if events else None
    match first:
        case ev.AllocationPreempted() | ev.AllocationGranted() | ev.AllocationQueued() | ev.AllocationRejected():
            for event in events:
                if (isinstance(event, ev.AllocationGranted) and not event.from_queue) or \
                        isinstance(event, ev.AllocationQueued | ev.AllocationRejected):
                    return it.RequestAllocation(intent_id=intent_id, spec=event.spec)
            return None
        case ev.AllocationReleased():
            return it.ReleaseAllocation(intent_id=intent_id, allocation_id=first.allocation_id,
                                        namespace=first.namespace, pod=first.pod, pool=first.pool, reason=first.reason)
        case ev.AllocationResized() | ev.ResizeRejected():
            return it.ResizeAllocation(intent_id=intent_id, allocation_id=first.allocation_id, request=first.request,
                                       limit=first.limit, pool=first.pool)
        case ev.NodeRegistered():
            intent = it.RegisterNode(
                intent_id=intent_id, node=first.node, pool=first.pool, gpus=first.gpus, labels=first.labels,
                cpu_milli=first.cpu_milli, memory_bytes=first.memory_bytes, schedulable=first.schedulable,
                heartbeat_ttl_s=first.heartbeat_ttl_s, source=first.source)
            known.learn(intent)
            return intent
        case ev.NodeHeartbeat():
            last = known.nodes.get(first.node)
            return None if last is None else it.RegisterNode(
                intent_id=intent_id, node=last.node, pool=last.pool, gpus=last.gpus, labels=last.labels,
                cpu_milli=last.cpu_milli, memory_bytes=last.memory_bytes, schedulable=last.schedulable,
                heartbeat_ttl_s=last.heartbeat_ttl_s, source=last.source)
        case ev.HeartbeatsChecked():
            return it.CheckHeartbeats(intent_id=intent_id)
        case ev.QuotaSet():
            return it.SetQuota(intent_id=intent_id, namespace=first.namespace, spec=first.spec)
        case ev.QuotaRemoved():
            return it.RemoveQuota(intent_id=intent_id, namespace=first.namespace)
        case ev.PoolConfigured():
            return it.ConfigurePool(intent_id=intent_id, pool=first.pool, config=first.config)
        case ev.PoolRemoved():
            return it.RemovePool(intent_id=intent_id, pool=first.pool)
        case ev.ShareSet():
            return it.SetShare(intent_id=intent_id, name=first.name, spec=first.spec)
        case ev.ShareRemoved():
            return it.RemoveShare(intent_id=intent_id, name=first.name)
    return None
