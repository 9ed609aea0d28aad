"""Handover: which preemptors wait for which victims' pods to be gone (pure, no I/O).

A preemption is one decision in the log: an AllocationPreempted per victim, then the preemptor's
AllocationGranted with ``preempted`` = the victims' ids. The binder evicts each victim's pod and
keeps the preemptor's scheduling gate until every victim pod is gone (deleted, finished, or not
found once the pod list is complete), so the preemptor never starts next to a process still using
its GPUs. Driven only by events and pod observations, never by a timer (TensorFusion instead
nominates the node and waits for a scheduler re-queue, minutes in practice).

Rebuilt on restart by replaying GPULEDGER_EVENTS into a fresh Handover; which victims are gone is
then learnt again from the pod list. A victim id once gone stays known as gone, so a grant folded
after the victim's pod vanished does not wait for it.
"""

from __future__ import annotations

import msgspec

from events import decisions


class Victim(msgspec.Struct, frozen=True, kw_only=True):
    """A preempted allocation whose pod must go: where it ran, for whom it was preempted (allocation id),
    and ``note``, the words written on its pod (preemptor pod, both priorities, reason)."""

    allocation_id: str
    namespace: str
    pod: str
    preemptor: str
    note: str = ""


class Handover:
    """``victims``: preempted allocations whose pods are not yet known gone; ``waiting``: preemptor id ->
    ids of victims it still waits for; ``gone``: victim ids whose pods are known gone."""

    def __init__(self) -> None:
        self.victims: dict[str, Victim] = {}
        self.waiting: dict[str, set[str]] = {}
        self.gone: set[str] = set()

    def preempted(self, event: decisions.AllocationPreempted) -> Victim | None:
        """Record a victim; returns it when its pod must still be evicted (None if already gone)."""
        if event.allocation_id in self.gone:
            return None
        note = (f"{event.preemptor_namespace}/{event.preemptor_pod} (priority {event.preemptor_priority} over "
                f"{event.priority}){': ' + event.reason if event.reason else ''}")
        victim = Victim(allocation_id=event.allocation_id, namespace=event.namespace, pod=event.pod,
                        preemptor=event.preemptor, note=note)
        self.victims[event.allocation_id] = victim
        return victim

    def granted(self, allocation_id: str, preempted: tuple[str, ...]) -> bool:
        """Record a grant; True when its pod may be ungated now (no victim pod left to wait for)."""
        pending = {victim for victim in preempted if victim not in self.gone}
        if pending:
            self.waiting[allocation_id] = pending
        else:
            self.waiting.pop(allocation_id, None)
        return not pending

    def victim_gone(self, allocation_id: str) -> list[str]:
        """The victim's pod is gone; returns the preemptors that wait for no victim any more."""
        self.gone.add(allocation_id)
        self.victims.pop(allocation_id, None)
        freed = []
        for preemptor, pending in list(self.waiting.items()):
            if allocation_id in pending:
                pending.discard(allocation_id)
                if not pending:
                    del self.waiting[preemptor]
                    freed.append(preemptor)
        return sorted(freed)

    def ended(self, allocation_id: str) -> None:
        """A preemptor's allocation ended (released, or its pod left): it waits for nothing."""
        self.waiting.pop(allocation_id, None)

    def blocked(self, allocation_id: str) -> bool:
        """True while the allocation's pod must keep its gate (a victim pod is still there)."""
        return allocation_id in self.waiting

    def is_victim(self, allocation_id: str) -> bool:
        """True for a preempted allocation (its pod's departure releases nothing: the domain freed it)."""
        return allocation_id in self.victims or allocation_id in self.gone
