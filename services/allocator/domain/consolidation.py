"""A consolidation (defragmentation) plan for one pool, dry run: which allocations to move where so
that the most nodes are left without any allocation, within a budget, explained move by move.

TensorFusion's compaction strategy 2 (internal/controller/gpupool_defrag.go, ``NodeCompaction.Defrag``)
takes the pool's nodes with at least one worker, emptiest first (used GPUs over the node's GPUs),
and for each simulates placing its workers elsewhere before evicting them, so that strategy 1 can
reclaim the emptied node. This module computes the same kind of campaign as a pure function of the
projection, on a copy-on-write scratch state with a forked Scheduler
(:class:`~services.allocator.domain.gang_place.Scratch`), and writes nothing:

- **Sources**, emptiest first: the pool's Ready nodes with a granted allocation, ordered by the
  share of their GPUs holding one, then the milli-TFLOPS charged there, then name. A node is
  drained whole or not at all (moving part of a node empties nothing); a node that received moves
  is never drained afterwards.
- **Targets**: the other nodes that hold allocations now and were not emptied by the plan (an idle
  node taking the moves would just trade places with the source). Each allocation is placed by
  ``attempt`` with the same filters, pool strategy and quota checks as a decision, restricted to
  those nodes, into free capacity only: nothing is preempted, so no allocation of any priority is
  displaced to make room. The largest allocations of a node are placed first.
- **Kept whole**: an allocation under ``tensor-fusion.ai/eviction-protection`` is never moved (its
  node is skipped); a gang member moves only with its whole gang, so a node is drained only when
  every live member of its gangs is on it; partitioned (MIG) and isolated requests are placed by the
  same partition and isolation rules as a grant.
- **Quota unchanged**: a move must keep the allocation's quota usage exactly: a compute share
  (percent) is placed only on nodes with GPUs of the capacity it holds now (converted on another
  capacity it would be charged other TFLOPS), and a target that would still change it is refused.
- **Budget** (:class:`Budget`): moves at most, the share of each namespace's granted allocations in
  the pool that may move, and the milli-TFLOPS in motion; a node whose drain would exceed it is
  skipped with the reason.

**Objective** (:data:`Objective`): ``"nodes"`` (the default, the above) empties the most nodes;
``"fragmentation"`` removes the most FGD fragmentation instead: the allocations of the pool's
Ready nodes are candidates, node by node in order of F_n(M), highest first, the largest of a node
first; each that may move (the rules below, the budget left) is moved alone to the node the
pool's strategy picks among the pool's other Ready nodes, and kept only when the pool's F(M) falls
(the source's fall beats the target's change); a node need not be emptied, an allocation moves at
most once, and the plan stops after trying :data:`TRIES_PER_MOVE` × ``max_moves`` allocations.
Emptied nodes help the largest (whole-node) requests; a lower F(M) is what the ATC'23 paper ties
to more requests accepted, and what ``gpuledger trace experiment --defrag``
measures (docs/placement.md). Under a Scheduler with a fixed target workload (the trace
experiment's) F(M) is measured under that workload.

Each drained node reports the pool before and after (:class:`PoolMeasure`: busy and idle nodes, and
the FGD fragmentation F(M) of Weng et al., ATC'23, under the pool's learned workload,
domain/target.py ``mix_of``; as unallocatable GPU and as TFLOPS). Cost: one scratch copy (O(GPUs +
nodes + allocations)), then per allocation tried one restricted ``attempt`` (O(targets)), and per
drained node one F_n(M) for each node it touched plus an exact sum over the pool's nodes.
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime
from typing import Literal

import msgspec

from events import decisions as ev
from events.quantity import tflops_text, vram_text
from events.values import Partition, Resources, priority_of
from services.allocator.domain.allocate import attempt, granted
from services.allocator.domain.deadlines import protected_until
from services.allocator.domain.evolve import evolve
from services.allocator.domain.filters.liveness import READY
from services.allocator.domain.gang_place import Scratch
from services.allocator.domain.model import GRANTED, MISSING, AllocationState, NodeState
from services.allocator.domain.placement import Grant
from services.allocator.domain.scheduler import Scheduler
from services.allocator.domain.state import ClusterState
from services.allocator.domain.strategies.fragmentation import MILLI_GPU, Workload, node_fragment
from services.allocator.domain.strategies.paper import cpu_free, free_milli
from services.allocator.domain.target import mix_of

SkipCode = Literal["not_ready", "protected", "gang", "moves", "tflops", "namespace", "no_room", "charges"]
"""Why a node was not drained: not Ready or unschedulable; an eviction-protected allocation; a gang
with members on other nodes; the budget of moves, of TFLOPS in motion, or of a namespace's share;
an allocation that fits no target; a target that would change an allocation's quota usage."""

MAX_MOVES = 1000
"""The largest ``max_moves`` a plan accepts (bounds its cost)."""

Objective = Literal["nodes", "fragmentation"]
OBJECTIVES: tuple[Objective, ...] = ("nodes", "fragmentation")
"""The plan's objectives, the default first."""
"""What a plan maximises: nodes emptied (the default) or FGD fragmentation F(M) removed."""

TRIES_PER_MOVE = 4
"""Under the ``fragmentation`` objective, allocations tried per move of the budget (bounds its cost)."""

_EPSILON_MILLI_GPU = 1e-6
"""A move must lower F(M) by more than this (float noise is no gain)."""


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    """What a plan may move: ``max_moves`` allocations (1..:data:`MAX_MOVES`), at most
    ``max_share_of_namespace_pct`` percent (0-100, rounded down to whole allocations) of each
    namespace's granted allocations in the pool, and at most ``max_milli_tflops`` milli-TFLOPS of
    charges in motion (None: unbounded). Raises ValueError naming the field when out of range."""

    max_moves: int
    max_share_of_namespace_pct: float = 100.0
    max_milli_tflops: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.max_moves <= MAX_MOVES:
            raise ValueError(f"max_moves must be from 1 to {MAX_MOVES}, got {self.max_moves}")
        if not 0 <= self.max_share_of_namespace_pct <= 100:
            raise ValueError(f"max_share_of_namespace must be a percentage from 0 to 100, "
                             f"got {self.max_share_of_namespace_pct}")
        if self.max_milli_tflops is not None and self.max_milli_tflops <= 0:
            raise ValueError(f"max_tflops must be positive, got {self.max_milli_tflops} milli-TFLOPS")


class PoolMeasure(msgspec.Struct, frozen=True, kw_only=True):
    """A pool's consolidation figures: nodes holding a granted allocation (``busy_nodes``) and not
    (``idle_nodes``), the FGD fragmentation F(M) = Σ_n F_n(M) in milli-GPU (``fragmented_milli_gpu``,
    the unallocatable GPU times 1000) and the same in milli-TFLOPS (each node's F_n(M) times its mean
    GPU capacity), and the free milli-GPU (GPUs discovery no longer reports left out)."""

    busy_nodes: int
    idle_nodes: int
    fragmented_milli_gpu: float
    fragmented_milli_tflops: float
    free_milli_gpu: int


class Move(msgspec.Struct, frozen=True, kw_only=True):
    """One allocation moved: who (id, namespace, pod, effective priority), from where (node, GPUs),
    to where (node, GPUs, the per-GPU ``charges`` and ``partitions`` there), and what it frees on
    the source (``frees``: Σ of its charges, milli-TFLOPS and bytes)."""

    allocation_id: str
    namespace: str
    pod: str
    priority: int
    source_node: str
    source_gpus: tuple[str, ...]
    target_node: str
    target_gpus: tuple[str, ...]
    charges: tuple[Resources, ...]
    partitions: tuple[Partition, ...] = ()
    frees: Resources = Resources()

    def sentence(self) -> str:
        """``move team-a/p (uid, priority 0) from n3 (n3-gpu0) to n1 (n1-gpu1): frees 10 TFLOPS and 1 GiB on n3``."""
        return (f"move {self.namespace}/{self.pod} ({self.allocation_id}, priority {self.priority}) from "
                f"{self.source_node} ({', '.join(self.source_gpus)}) to {self.target_node} "
                f"({', '.join(self.target_gpus)}): frees {tflops_text(self.frees.milli_tflops)} and "
                f"{vram_text(self.frees.vram_bytes)} on {self.source_node}")


class Drain(msgspec.Struct, frozen=True, kw_only=True):
    """A node emptied by ``moves``, with the pool ``before`` and ``after`` them."""

    node: str
    moves: tuple[Move, ...]
    before: PoolMeasure
    after: PoolMeasure

    def sentence(self) -> str:
        """What the drain does and gains, in words."""
        tflops = sum(m.frees.milli_tflops for m in self.moves)
        vram = sum(m.frees.vram_bytes for m in self.moves)
        targets = sorted({m.target_node for m in self.moves})
        b, a = self.before, self.after
        return (f"empties {self.node}: {len(self.moves)} allocation(s) ({tflops_text(tflops)}, {vram_text(vram)}) "
                f"moved to {', '.join(targets)}; pool busy nodes {b.busy_nodes} -> {a.busy_nodes}, unallocatable GPU "
                f"{b.fragmented_milli_gpu / MILLI_GPU:.2f} -> {a.fragmented_milli_gpu / MILLI_GPU:.2f}, fragmented "
                f"{tflops_text(round(b.fragmented_milli_tflops))} -> {tflops_text(round(a.fragmented_milli_tflops))}")


class Skip(msgspec.Struct, frozen=True, kw_only=True):
    """A node the plan did not drain: ``code`` (:data:`SkipCode`) and the reason in words."""

    node: str
    code: SkipCode
    reason: str


class ConsolidationPlan(msgspec.Struct, frozen=True, kw_only=True):
    """The plan for ``pool`` under ``budget``: the nodes it empties in order (``drains``), the nodes
    it tried or could not try and why (``skipped``), the pool ``before`` and ``after`` every move,
    and ``stopped``: why it ended before trying every busy node ("" when it tried them all). Under
    the ``fragmentation`` objective ``drains`` is empty and ``moved`` holds the single moves."""

    pool: str
    budget: Budget
    drains: tuple[Drain, ...]
    skipped: tuple[Skip, ...]
    before: PoolMeasure
    after: PoolMeasure
    stopped: str = ""
    objective: Objective = "nodes"
    moved: tuple[Move, ...] = ()

    @property
    def moves(self) -> tuple[Move, ...]:
        """Every move, in plan order."""
        return tuple(m for d in self.drains for m in d.moves) + self.moved

    @property
    def nodes_emptied(self) -> tuple[str, ...]:
        """The drained nodes, in plan order."""
        return tuple(d.node for d in self.drains)


class _Scratch(Scratch):
    """The gang placement's scratch state, able to fold a release too (a move is a release on the
    source then a grant on the target)."""

    def release(self, allocation: AllocationState, now: datetime) -> None:
        """Fold the release of ``allocation`` (granted) into the scratch state only."""
        spec = allocation.spec
        self._own_records(tuple(allocation.gpus), allocation.node, spec.namespace)
        evolve(self.state, ev.AllocationReleased(
            at=now, allocation_id=spec.allocation_id, namespace=spec.namespace, pod=spec.pod, pool=spec.pool,
            node=allocation.node, gpus=tuple(allocation.gpus), reason="consolidation plan (dry run)"))

    def regrant(self, allocation: AllocationState, now: datetime) -> None:
        """Put ``allocation`` back where it was (undo of a tried move)."""
        self.apply(ev.AllocationGranted(at=now, spec=allocation.spec, node=allocation.node,
                                        gpus=tuple(allocation.gpus), charges=tuple(allocation.charges),
                                        partitions=tuple(allocation.partitions), share=allocation.share,
                                        borrowed=allocation.borrowed))


def node_measure(state: ClusterState, node: NodeState, workload: Workload) -> tuple[float, float, int]:
    """F_n(M) of ``node`` in milli-GPU, the same in milli-TFLOPS (times the mean capacity of its
    GPUs) and its free milli-GPU; GPUs discovery no longer reports are left out."""
    gpus = [g for g in (state.gpus.get(name) for name in node.gpus) if g is not None and g.phase != MISSING]
    if not gpus:
        return 0.0, 0.0, 0
    free = [free_milli(g) for g in gpus]
    frag = node_fragment(free, cpu_free=cpu_free(node), model=gpus[0].spec.model, workload=workload)
    mean_capacity = sum(g.spec.capacity.milli_tflops for g in gpus) / len(gpus)
    return frag, frag * mean_capacity / MILLI_GPU, sum(free)


def measure(state: ClusterState, pool: str) -> PoolMeasure:
    """The :class:`PoolMeasure` of ``pool`` in ``state`` now (exact sums: independent of node order)."""
    workload = mix_of(state, pool)
    parts = {name: node_measure(state, state.nodes[name], workload) for name in state.pool_nodes.get(pool, ())}
    busy = sum(1 for name in parts if state.nodes[name].workers)
    return _summed(parts, busy)


def _summed(parts: dict[str, tuple[float, float, int]], busy: int) -> PoolMeasure:
    return PoolMeasure(busy_nodes=busy, idle_nodes=len(parts) - busy,
                       fragmented_milli_gpu=math.fsum(p[0] for p in parts.values()),
                       fragmented_milli_tflops=math.fsum(p[1] for p in parts.values()),
                       free_milli_gpu=sum(p[2] for p in parts.values()))


def _charged(allocation: AllocationState) -> Resources:
    return Resources(milli_tflops=sum(c.milli_tflops for c in allocation.charges),
                     vram_bytes=sum(c.vram_bytes for c in allocation.charges))


def _source_order(state: ClusterState, node: NodeState) -> tuple[float, int, str]:
    gpus = [state.gpus[g] for g in node.gpus if g in state.gpus]
    used = sum(1 for g in gpus if g.charges)
    return (used / len(gpus) if gpus else 1.0, sum(g.used_milli_tflops for g in gpus), node.name)


class _Planner:
    """The mutable work of :func:`plan` (one per call)."""

    def __init__(self, state: ClusterState, pool: str, budget: Budget, now: datetime, scheduler: Scheduler) -> None:
        self.state, self.pool, self.budget, self.now = state, pool, budget, now
        self.scratch = _Scratch(state, scheduler)
        self.workload = scheduler.target or mix_of(state, pool)
        names = sorted(state.pool_nodes.get(pool, ()))
        self.parts = {n: node_measure(state, state.nodes[n], self.workload) for n in names}
        self.busy = {n for n in names if state.nodes[n].workers}
        lives = [a for a in state.allocations.values() if a.status == GRANTED and a.spec.pool == pool]
        self.per_namespace = Counter(a.spec.namespace for a in lives)
        self.gang_nodes: dict[str, set[str]] = {}
        for a in lives:
            if a.spec.gang is not None:
                self.gang_nodes.setdefault(a.spec.gang.key, set()).add(a.node)
        self.moved_namespace: Counter[str] = Counter()
        self.moves = 0
        self.milli_tflops = 0
        self.emptied: set[str] = set()
        self.received: set[str] = set()

    def skip_reason(self, node: NodeState, members: list[AllocationState]) -> tuple[SkipCode, str] | None:
        """Why ``node`` cannot be drained under the rules and the budget left, before any placement."""
        if node.phase != READY or not node.schedulable:
            return "not_ready", f"node {node.name} is {node.phase}{'' if node.schedulable else ', unschedulable'}"
        for a in members:
            until = protected_until(a)
            if until is not None and until > self.now:
                return "protected", (f"{a.spec.namespace}/{a.spec.pod} is under eviction protection until "
                                     f"{until.isoformat()}")
            gang = a.spec.gang
            if gang is not None and self.gang_nodes.get(gang.key, set()) - {node.name}:
                others = ", ".join(sorted(self.gang_nodes[gang.key] - {node.name}))
                return "gang", f"gang {gang.key} also has members on {others}: a gang moves whole or not at all"
        left = self.budget.max_moves - self.moves
        if len(members) > left:
            return "moves", f"draining it takes {len(members)} move(s), {left} left in the budget"
        tflops = sum(_charged(a).milli_tflops for a in members)
        cap = self.budget.max_milli_tflops
        if cap is not None and self.milli_tflops + tflops > cap:
            return "tflops", (f"draining it puts {tflops_text(tflops)} in motion, "
                              f"{tflops_text(cap - self.milli_tflops)} left in the budget")
        wanted = Counter(a.spec.namespace for a in members)
        for namespace, count in sorted(wanted.items()):
            allowed = math.floor(self.per_namespace[namespace] * self.budget.max_share_of_namespace_pct / 100)
            if self.moved_namespace[namespace] + count > allowed:
                return "namespace", (f"namespace {namespace} may move {allowed} of its "
                                     f"{self.per_namespace[namespace]} allocation(s) "
                                     f"({self.budget.max_share_of_namespace_pct:g} %), "
                                     f"{self.moved_namespace[namespace]} already planned, {count} more needed")
        return None

    def keeping_charges(self, allocation: AllocationState, targets: list[str]) -> list[str]:
        """``targets`` where ``allocation`` would be charged as now: for a compute share (percent),
        the nodes with GPUs of the capacity it holds now (a share of another capacity converts to
        other TFLOPS, so its quota usage would change); every target for a request in TFLOPS."""
        spec = allocation.spec
        if not (spec.request.compute_milli_percent or spec.limit.compute_milli_percent):
            return targets
        held = {self.state.gpus[g].spec.capacity.milli_tflops for g in allocation.gpus if g in self.state.gpus}
        gpus = self.scratch.state.gpus
        return [t for t in targets
                if any(g in gpus and gpus[g].spec.capacity.milli_tflops in held for g in self.state.nodes[t].gpus)]

    def drain(self, node: NodeState) -> list[Move] | Skip:
        """Move every allocation of ``node`` to the targets on the scratch state, or undo and say why not."""
        s = self.scratch
        members = sorted((s.state.allocations[a] for a in node.workers),
                         key=lambda a: (-a.spec.gpu_count, -_charged(a).milli_tflops, a.spec.allocation_id))
        why = self.skip_reason(node, members)
        if why is not None:
            return Skip(node=node.name, code=why[0], reason=why[1])
        targets = sorted(self.busy - self.emptied - {node.name})
        done: list[tuple[AllocationState, Grant]] = []
        for a in members:
            s.release(a, self.now)
            outcome = attempt(s.state, a.spec, s.scheduler, restrict=self.keeping_charges(a, targets))
            if not isinstance(outcome, Grant):
                problem: tuple[SkipCode, str] = "no_room", (
                    f"{a.spec.namespace}/{a.spec.pod} fits no other busy node of pool {self.pool}: {outcome.reason}")
            elif outcome.usage != a.usage:
                problem = "charges", (f"{a.spec.namespace}/{a.spec.pod} would be charged differently on "
                                      f"{outcome.node} (a move keeps its quota usage)")
            else:
                s.apply(granted(a.spec, outcome, now=self.now, from_queue=True))
                done.append((a, outcome))
                continue
            s.regrant(a, self.now)
            for moved, _ in reversed(done):
                s.release(s.state.allocations[moved.spec.allocation_id], self.now)
                s.regrant(moved, self.now)
            return Skip(node=node.name, code=problem[0], reason=problem[1])
        return [Move(allocation_id=a.spec.allocation_id, namespace=a.spec.namespace, pod=a.spec.pod,
                     priority=priority_of(a.spec), source_node=node.name, source_gpus=tuple(a.gpus),
                     target_node=g.node, target_gpus=g.gpus, charges=g.charges, partitions=g.partitions,
                     frees=_charged(a)) for a, g in done]

    def movable(self, allocation: AllocationState) -> bool:
        """Whether ``allocation`` may move alone now: not under eviction protection, not a gang
        member, and within the budget left (moves, TFLOPS in motion, its namespace's share)."""
        spec = allocation.spec
        until = protected_until(allocation)
        if (until is not None and until > self.now) or spec.gang is not None:
            return False
        cap = self.budget.max_milli_tflops
        if cap is not None and self.milli_tflops + _charged(allocation).milli_tflops > cap:
            return False
        allowed = math.floor(self.per_namespace[spec.namespace] * self.budget.max_share_of_namespace_pct / 100)
        return self.moves < self.budget.max_moves and self.moved_namespace[spec.namespace] < allowed

    def move_one(self, allocation: AllocationState, targets: list[str]) -> Move | None:
        """Move ``allocation`` alone to the node the pool's strategy picks among ``targets`` on the
        scratch state when that lowers the pool's F(M); else undo and None."""
        s, source = self.scratch, allocation.node
        s.release(allocation, self.now)
        outcome = attempt(s.state, allocation.spec, s.scheduler, restrict=self.keeping_charges(allocation, targets))
        if isinstance(outcome, Grant) and outcome.usage == allocation.usage:
            s.apply(granted(allocation.spec, outcome, now=self.now, from_queue=True))
            after = {n: node_measure(s.state, s.state.nodes[n], self.workload) for n in (source, outcome.node)}
            if sum(after[n][0] - self.parts[n][0] for n in after) < -_EPSILON_MILLI_GPU:
                self.parts.update(after)
                self.moves += 1
                self.milli_tflops += _charged(allocation).milli_tflops
                self.moved_namespace[allocation.spec.namespace] += 1
                return Move(allocation_id=allocation.spec.allocation_id, namespace=allocation.spec.namespace,
                            pod=allocation.spec.pod, priority=priority_of(allocation.spec), source_node=source,
                            source_gpus=tuple(allocation.gpus), target_node=outcome.node, target_gpus=outcome.gpus,
                            charges=outcome.charges, partitions=outcome.partitions, frees=_charged(allocation))
            s.release(s.state.allocations[allocation.spec.allocation_id], self.now)
        s.regrant(allocation, self.now)
        return None

    def commit(self, node: str, moves: list[Move]) -> Drain:
        """Account ``moves`` (which emptied ``node``) and measure the pool before and after."""
        before = _summed(self.parts, len(self.busy))
        self.moves += len(moves)
        self.milli_tflops += sum(m.frees.milli_tflops for m in moves)
        self.moved_namespace.update(m.namespace for m in moves)
        self.emptied.add(node)
        self.busy.discard(node)
        touched = {node} | {m.target_node for m in moves}
        self.received |= touched - {node}
        for name in touched:
            self.parts[name] = node_measure(self.scratch.state, self.scratch.state.nodes[name], self.workload)
        return Drain(node=node, moves=tuple(moves), before=before, after=_summed(self.parts, len(self.busy)))


def plan(state: ClusterState, pool: str, budget: Budget, now: datetime, scheduler: Scheduler, *,
         objective: Objective = "nodes") -> ConsolidationPlan:
    """The consolidation plan of ``pool`` within ``budget`` at ``now`` for ``objective`` (the rules:
    module docstring).

    Never mutates ``state``; ``scheduler`` is the Scheduler of ``state`` (forked for the scratch
    copy, its own caches untouched). Raises KeyError for a pool with no node."""
    return planned(state, pool, budget, now, scheduler, objective=objective)[0]


def planned(state: ClusterState, pool: str, budget: Budget, now: datetime, scheduler: Scheduler, *,
            objective: Objective = "nodes") -> tuple[ConsolidationPlan, ClusterState]:
    """:func:`plan` and its predicted end state: the scratch copy the moves were folded into (it
    shares the records no move touched with ``state``: read it, never mutate it)."""
    if pool not in state.pool_nodes:
        raise KeyError(pool)
    planner = _Planner(state, pool, budget, now, scheduler)
    start = _summed(planner.parts, len(planner.busy))
    if objective == "fragmentation":
        moved, why = _defragmented(planner, state)
        busy = sum(1 for n in planner.parts if planner.scratch.state.nodes[n].workers)
        return ConsolidationPlan(pool=pool, budget=budget, drains=(), skipped=(), before=start,
                                 after=_summed(planner.parts, busy), stopped=why, objective=objective,
                                 moved=tuple(moved)), planner.scratch.state
    drains: list[Drain] = []
    skipped: list[Skip] = []
    stopped = ""
    sources = sorted((state.nodes[n] for n in planner.busy), key=lambda n: _source_order(state, n))
    for i, node in enumerate(sources):
        if planner.moves >= budget.max_moves:
            untried = sum(1 for n in sources[i:] if n.name not in planner.received)
            stopped = f"the budget of {budget.max_moves} move(s) is used; {untried} busy node(s) not tried"
            break
        if node.name in planner.received:
            continue
        outcome = planner.drain(planner.scratch.state.nodes[node.name])
        if isinstance(outcome, Skip):
            skipped.append(outcome)
        else:
            drains.append(planner.commit(node.name, outcome))
    end = drains[-1].after if drains else start
    result = ConsolidationPlan(pool=pool, budget=budget, drains=tuple(drains), skipped=tuple(skipped),
                               before=start, after=end, stopped=stopped)
    return result, planner.scratch.state


def _defragmented(planner: _Planner, state: ClusterState) -> tuple[list[Move], str]:
    """The ``fragmentation`` objective's moves (module docstring) and why it stopped ("" when it
    tried every candidate)."""
    budget, s = planner.budget, planner.scratch
    ready = [n for n in sorted(planner.parts) if state.nodes[n].phase == READY and state.nodes[n].schedulable]
    sources = sorted((n for n in ready if state.nodes[n].workers), key=lambda n: (-planner.parts[n][0], n))
    candidates = [a.spec.allocation_id for n in sources for a in sorted(
        (state.allocations[a] for a in state.nodes[n].workers),
        key=lambda a: (-a.spec.gpu_count, -_charged(a).milli_tflops, a.spec.allocation_id))]
    tries = TRIES_PER_MOVE * budget.max_moves
    moves: list[Move] = []
    for allocation_id in candidates:
        if planner.moves >= budget.max_moves:
            return moves, f"the budget of {budget.max_moves} move(s) is used"
        if tries <= 0:
            return moves, f"{TRIES_PER_MOVE * budget.max_moves} allocation(s) tried (the bound)"
        allocation = s.state.allocations[allocation_id]
        if not planner.movable(allocation):
            continue
        tries -= 1
        move = planner.move_one(allocation, [n for n in ready if n != allocation.node])
        if move is not None:
            moves.append(move)
    return moves, ""


def execution(state: ClusterState, plan_: ConsolidationPlan, now: datetime) -> list[ev.AnyEvent]:
    """The events executing ``plan_`` in order would fold (per move, the release on the source, then
    the grant on the target with the planned GPUs, charges and partitions): the plan's predicted end
    state is ``state`` with these folded. ``state`` is the one the plan was computed on."""
    out: list[ev.AnyEvent] = []
    for move in plan_.moves:
        allocation = state.allocations[move.allocation_id]
        spec = allocation.spec
        out.append(ev.AllocationReleased(
            at=now, allocation_id=spec.allocation_id, namespace=spec.namespace, pod=spec.pod, pool=spec.pool,
            node=move.source_node, gpus=move.source_gpus, reason="consolidation: moved"))
        out.append(ev.AllocationGranted(at=now, spec=spec, node=move.target_node, gpus=move.target_gpus,
                                        charges=move.charges, partitions=move.partitions, share=allocation.share,
                                        borrowed=allocation.borrowed))
    return out
