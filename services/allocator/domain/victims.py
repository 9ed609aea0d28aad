"""Who may be preempted: strictly lower priority, not under eviction protection, in scope.

The rules are kube-scheduler DefaultPreemption's as TensorFusion patches it (TensorFusion
internal/gpuallocator/gpuallocator.go FilterWithPreempt; the scheduler patch
``patches/scheduler-pdb-1.patch``): a victim's effective priority (``events.values.priority_of``)
must be strictly below the preemptor's; a victim whose request carries
``tensor-fusion.ai/eviction-protection: <duration>`` (a Go duration such as ``30m`` or ``1h30m``,
carried in ``AllocationSpec.attributes``) is spared until its request time + duration; with the
pool's ``preemption: namespace`` only allocations of the preemptor's namespace are candidates.
An unparseable duration protects nothing (as a missing annotation; domain/deadlines.py). Pure.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from events.values import priority_of
from services.allocator.domain.deadlines import PROTECTION_KEY as PROTECTION_KEY
from services.allocator.domain.deadlines import protected_until
from services.allocator.domain.model import AllocationState, NodeState
from services.allocator.domain.state import ClusterState

PRIORITY_OFFSET = 2**31
"""Added to each victim's priority in the sum kube-scheduler compares (pickOneNodeForPreemption:
``int64(priority) + MaxInt32 + 1``), so that every victim adds a positive amount."""


class Refusals:
    """Why lower-priority allocations on the nodes searched were not candidates (for explanations)."""

    __slots__ = ("out_of_scope", "protected")

    def __init__(self) -> None:
        self.protected = 0
        self.out_of_scope = 0


Ranked = tuple[tuple[int, str], ...]
"""A node's granted allocations as (effective priority, allocation id), ascending."""


def ranked_on(state: ClusterState, node: str) -> Ranked:
    """``node``'s granted allocations by effective priority, then id."""
    allocations = state.allocations
    return tuple(sorted((priority_of(allocations[a].spec), a) for a in state.nodes[node].workers))


def candidates_on(state: ClusterState, ranked: Ranked, *, priority: int, namespace: str, scope: str,
                  now: datetime, refusals: Refusals) -> list[AllocationState]:
    """The allocations of ``ranked`` (one node's, :func:`ranked_on`) that a request of ``priority``
    in ``namespace`` may preempt at ``now`` under the pool's ``scope``, most important first
    (kube-scheduler's reprieve order: higher priority, then earlier grant, then allocation id; a
    member its gang needs for the quorum before others of its priority: :func:`importance`)."""
    out: list[AllocationState] = []
    for level, aid in ranked:
        if level >= priority:
            break
        allocation = state.allocations[aid]
        if scope == "namespace" and allocation.spec.namespace != namespace:
            refusals.out_of_scope += 1
        elif (until := protected_until(allocation)) is not None and now < until:
            refusals.protected += 1
        else:
            out.append(allocation)
    out.sort(key=lambda a: importance(a, state))
    return out


def freed_by(victims: Sequence[AllocationState]) -> dict[str, list[int]]:
    """Per GPU what taking ``victims`` gives back there: [milli-TFLOPS, VRAM bytes, charges]."""
    freed: dict[str, list[int]] = {}
    for victim in victims:
        for name, charge in zip(victim.gpus, victim.charges, strict=True):
            amounts = freed.setdefault(name, [0, 0, 0])
            amounts[0] += charge.milli_tflops
            amounts[1] += charge.vram_bytes
            amounts[2] += 1
    return freed


class CandidateSums:
    """What the plan search's bounds read from one node's candidates, summed once: ``freed`` per
    GPU [milli-TFLOPS, VRAM bytes, charges] and ``cpu`` (millicores) that taking every one gives
    back (``Trial.frees``), ``held`` per GPU the charges' TFLOPS and VRAM each largest first,
    ``cpus`` their CPU largest first, ``memories`` their memory (bytes) largest first and
    ``memory`` its sum, ``spans`` how many GPUs each holds charges on, largest first, and
    ``prefix`` the prefix sums of their terms ascending."""

    __slots__ = ("cpu", "cpus", "freed", "held", "memories", "memory", "prefix", "spans")

    def __init__(self, cands: list[AllocationState]) -> None:
        held: dict[str, tuple[list[int], list[int]]] = {}
        for cand in cands:
            for name, charge in zip(cand.gpus, cand.charges, strict=True):
                tflops, vram = held.setdefault(name, ([], []))
                tflops.append(charge.milli_tflops)
                vram.append(charge.vram_bytes)
        for tflops, vram in held.values():
            tflops.sort(reverse=True)
            vram.sort(reverse=True)
        self.freed, self.held = freed_by(cands), held
        self.cpus = sorted((c.spec.cpu_milli for c in cands), reverse=True)
        self.cpu = sum(self.cpus)
        self.memories = sorted((c.spec.memory_bytes for c in cands), reverse=True)
        self.memory = sum(self.memories)
        self.spans = sorted((len(c.gpus) for c in cands), reverse=True)
        self.prefix = list(itertools.accumulate(sorted(term(c) for c in cands), initial=0))

    def smallest(self, count: int) -> int:
        """The sum of the ``count`` smallest terms (all of them when ``count`` exceeds their number)."""
        return self.prefix[min(count, len(self.prefix) - 1)]


class CandidateSet:
    """One node's candidates (:func:`candidates_on`, most important first), ``floor`` the lowest
    candidate priority, and their :class:`CandidateSums` (``sums``, built on first use).
    ``out_of_scope``: the refusals for scope while building it; ``keepable``: nothing was refused
    for protection and no candidate belongs to a gang (both can change without the node being
    touched), so it may be kept until the node is.

    A set lives no longer than the node stays untouched, so it also keeps, for every search key
    that reads it, what depends only on the request's per-GPU amounts and count and on the node
    as it is: ``deficits`` (``Trial.deficits`` by (milli-TFLOPS, milli-percent, VRAM bytes)),
    ``lowers`` (the plan search's lower bound by those, the GPU count and ``shared``) and
    ``enough`` (``Trial.enough`` of every candidate by the same)."""

    __slots__ = ("_sums", "cands", "deficits", "enough", "floor", "keepable", "lowers", "out_of_scope")

    def __init__(self, cands: list[AllocationState], out_of_scope: int = 0, keepable: bool = False) -> None:
        self.cands, self.out_of_scope, self.keepable = cands, out_of_scope, keepable
        self.floor = priority_of(cands[-1].spec) if cands else 0
        self._sums: CandidateSums | None = None
        self.deficits: dict[tuple[int, int, int], list[tuple[str, int, int, int]]] = {}
        self.lowers: dict[tuple[int, int, int, int, bool], tuple[int, int, int]] = {}
        self.enough: dict[tuple[int, int, int, int, bool], bool] = {}

    @property
    def sums(self) -> CandidateSums:
        """The candidates' :class:`CandidateSums` (built on first use)."""
        found = self._sums
        if found is None:
            found = self._sums = CandidateSums(self.cands)
        return found


def candidate_set(state: ClusterState, ranked: Ranked, *, priority: int, namespace: str, scope: str,
                  now: datetime, refusals: Refusals) -> CandidateSet:
    """:func:`candidates_on` as a :class:`CandidateSet` (``refusals`` counted the same way)."""
    protected, out_of_scope = refusals.protected, refusals.out_of_scope
    cands = candidates_on(state, ranked, priority=priority, namespace=namespace, scope=scope, now=now,
                          refusals=refusals)
    keepable = refusals.protected == protected and all(c.spec.gang is None for c in cands)
    return CandidateSet(cands, refusals.out_of_scope - out_of_scope, keepable)


def importance(allocation: AllocationState, state: ClusterState) -> tuple[int, bool, datetime, str]:
    """Sort key, most important first: higher priority, then a gang member whose loss would leave
    its gang below its quorum (so the reprieve breaks as few gangs as it can; issue 17), earlier
    grant, allocation id."""
    granted = allocation.granted_at or allocation.requested_at
    return (-priority_of(allocation.spec), not _holds_quorum(state, allocation), granted,
            allocation.spec.allocation_id)


def _holds_quorum(state: ClusterState, allocation: AllocationState) -> bool:
    gang = allocation.spec.gang
    if gang is None:
        return False
    members = state.gangs.get(gang.key)
    return members is not None and len(members.granted) <= gang.quorum


def term(allocation: AllocationState) -> int:
    """One victim's addend in kube-scheduler's priority sum (priority + 2³¹, never negative)."""
    return priority_of(allocation.spec) + PRIORITY_OFFSET


class PriorityIndex:
    """Per node its granted allocations by priority (:func:`ranked_on`), per pool how many nodes
    have each lowest priority: the Scheduler's cache, refreshed for the nodes evolve touched, so
    that "is there anything of lower priority here?" costs O(1) and a node's candidates are a prefix."""

    __slots__ = ("_cpu", "_nodes", "_pools")

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[str, Ranked]] = {}
        self._pools: dict[str, Counter[int]] = {}
        self._cpu: dict[str, list[int]] = {}
        """Per node the CPU (millicores) its allocations hold, summed in ``ranked`` order (prefix sums)."""

    def copy(self) -> PriorityIndex:
        """An independent copy (for a Scheduler forked onto a hypothetical state)."""
        other = PriorityIndex()
        other._nodes = dict(self._nodes)
        other._pools = {pool: Counter(counts) for pool, counts in self._pools.items()}
        other._cpu = dict(self._cpu)
        return other

    def drop(self, node: str) -> None:
        """Forget ``node``."""
        self._cpu.pop(node, None)
        previous = self._nodes.pop(node, None)
        if previous is not None and previous[1]:
            counts = self._pools[previous[0]]
            floor = previous[1][0][0]
            counts[floor] -= 1
            if not counts[floor]:
                del counts[floor]

    def refresh(self, state: ClusterState, node: NodeState) -> None:
        """Recompute ``node``'s entry from its allocations."""
        self.drop(node.name)
        ranked = ranked_on(state, node.name)
        self._nodes[node.name] = (node.pool, ranked)
        allocations = state.allocations
        self._cpu[node.name] = list(itertools.accumulate((allocations[a].spec.cpu_milli for _, a in ranked),
                                                         initial=0))
        if ranked:
            self._pools.setdefault(node.pool, Counter())[ranked[0][0]] += 1

    def ranked(self, node: str) -> Ranked:
        """``node``'s allocations by priority (empty: none, or unknown node)."""
        entry = self._nodes.get(node)
        return () if entry is None else entry[1]

    def cpu_below(self, node: str, priority: int) -> int:
        """The CPU (millicores) held on ``node`` by allocations of a priority below ``priority``:
        what taking every one of them would give back."""
        entry = self._nodes.get(node)
        if entry is None:
            return 0
        return self._cpu[node][bisect.bisect_left(entry[1], (priority, ""))]

    def pool(self, pool: str) -> int | None:
        """The lowest priority granted in ``pool`` (None: nothing granted)."""
        counts = self._pools.get(pool)
        return min(counts) if counts else None
