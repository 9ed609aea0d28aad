"""Every read the dashboard makes of the projection's records (GPUs, nodes, allocations, queue).

Pure functions of a :class:`ClusterState`; they read records only (never the scheduler's caches
or indexes), so a change of the domain's internals is adapted here and nowhere else.

Terms. A GPU's *used share* is the larger of its used TFLOPS and used VRAM over capacity, capped
at 1 (the scarcer dimension decides whether anything else fits). A GPU is *idle* at share 0,
*full* at 1 and *fragmented* in between: its free part is stranded for any whole-GPU request.
A pool's *unallocated %* is Σ(1 − share) / GPUs × 100 (the paper's unallocated GPU %, in GPU
units) and its *fragmentation %* is Σ(1 − share) over fragmented GPUs / GPUs × 100: the paper's
F(M) for a workload of whole-GPU tasks (Weng et al., ATC'23, "Beware of Fragmentation").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime

import msgspec

from services.allocator.api import reasons
from services.allocator.domain.filters.liveness import READY
from services.allocator.domain.model import GRANTED, MISSING, QUEUED, AllocationState, GpuState, NodeState
from services.allocator.domain.state import ClusterState

SHARE_CLASSES = 6
"""Colour classes of the GPU map: 0 idle, 1-4 fragmented by quarter of use, 5 full."""


def used_share(gpu: GpuState) -> float:
    """max(used/capacity) over TFLOPS and VRAM, in [0, 1] (0 for a GPU without capacity)."""
    cap = gpu.capacity
    tflops = gpu.used_milli_tflops / cap.milli_tflops if cap.milli_tflops else 0.0
    vram = gpu.used_vram_bytes / cap.vram_bytes if cap.vram_bytes else 0.0
    return min(1.0, max(tflops, vram))


def share_class(share: float) -> int:
    """0 idle, 5 full, else 1 + the quarter of use (1: up to 25 %, ..., 4: above 75 %)."""
    if share <= 0.0:
        return 0
    if share >= 1.0:
        return SHARE_CLASSES - 1
    return 1 + min(3, int(share * 4))


class Quality(msgspec.Struct, frozen=True, kw_only=True):
    """Placement quality of a set of GPUs: counts and percentages of the module docstring."""

    gpus: int = 0
    idle: int = 0
    full: int = 0
    fragmented: int = 0
    unallocated_pct: float = 0.0
    fragmentation_pct: float = 0.0


def quality_of(gpus: Iterable[GpuState]) -> Quality:
    """The :class:`Quality` of ``gpus`` (all zero for none)."""
    count = idle = full = fragmented = 0
    free = stranded = 0.0
    for gpu in gpus:
        share = used_share(gpu)
        count += 1
        free += 1.0 - share
        if share <= 0.0:
            idle += 1
        elif share >= 1.0:
            full += 1
        else:
            fragmented += 1
            stranded += 1.0 - share
    if not count:
        return Quality()
    return Quality(gpus=count, idle=idle, full=full, fragmented=fragmented,
                   unallocated_pct=100 * free / count, fragmentation_pct=100 * stranded / count)


class PoolSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One pool: nodes (lost ones counted apart; idle ones, with no granted allocation, too),
    capacity and used (milli-TFLOPS, bytes), queue."""

    name: str
    nodes: int
    lost_nodes: int
    idle_nodes: int = 0
    capacity_milli_tflops: int
    capacity_vram_bytes: int
    used_milli_tflops: int
    used_vram_bytes: int
    queued: int
    quality: Quality


def pools(state: ClusterState) -> list[PoolSummary]:
    """Every pool that has nodes or queued requests, by name."""
    members: dict[str, list[GpuState]] = {}
    for gpu in state.gpus.values():
        members.setdefault(gpu.pool, []).append(gpu)
    nodes: dict[str, list[NodeState]] = {}
    for node in state.nodes.values():
        nodes.setdefault(node.pool, []).append(node)
    queued: dict[str, int] = {}
    for allocation in state.allocations.values():
        if allocation.status == QUEUED:
            queued[allocation.spec.pool] = queued.get(allocation.spec.pool, 0) + 1
    out = []
    for name in sorted(set(members) | set(nodes) | set(queued)):
        gpus = members.get(name, [])
        out.append(PoolSummary(
            name=name, nodes=len(nodes.get(name, [])),
            lost_nodes=sum(1 for n in nodes.get(name, []) if n.phase != READY),
            idle_nodes=sum(1 for n in nodes.get(name, []) if n.idle_since is not None),
            capacity_milli_tflops=sum(g.capacity.milli_tflops for g in gpus if g.phase != MISSING),
            capacity_vram_bytes=sum(g.capacity.vram_bytes for g in gpus if g.phase != MISSING),
            used_milli_tflops=sum(min(g.used_milli_tflops, g.capacity.milli_tflops) for g in gpus
                                  if g.phase != MISSING),
            used_vram_bytes=sum(min(g.used_vram_bytes, g.capacity.vram_bytes) for g in gpus if g.phase != MISSING),
            queued=queued.get(name, 0), quality=quality_of(gpus)))
    return out


def models(state: ClusterState) -> list[str]:
    """Every GPU model in the inventory, sorted."""
    return sorted({gpu.spec.model for gpu in state.gpus.values()})


class MapFilter(msgspec.Struct, frozen=True, kw_only=True):
    """GPU map filters: exact ``pool`` and ``model``, ``node`` substring, ``show`` one of SHOW."""

    pool: str = ""
    model: str = ""
    node: str = ""
    show: str = ""


SHOW = ("", "idle", "fragmented", "full", "lost")
"""Values of MapFilter.show: every GPU, or only idle, fragmented, full GPUs, or lost nodes' GPUs."""


class Cell(msgspec.Struct, frozen=True, kw_only=True):
    """One GPU of the map: name, model, share class, used %, live allocation count, phase."""

    name: str
    model: str
    share_class: int
    used_pct: int
    allocations: int
    phase: str


class NodeGroup(msgspec.Struct, frozen=True, kw_only=True):
    """One node of the map with its GPU cells (in the node's GPU order)."""

    name: str
    pool: str
    phase: str
    lost: bool
    cells: list[Cell]


def _keep(gpu: GpuState, share: float, node: NodeState, show: str) -> bool:
    if show == "idle":
        return share <= 0.0
    if show == "full":
        return share >= 1.0
    if show == "fragmented":
        return 0.0 < share < 1.0
    if show == "lost":
        return node.phase != READY
    return True


def gpu_map(state: ClusterState, flt: MapFilter) -> Iterator[NodeGroup]:
    """Node groups (sorted by pool, then node name) with their GPUs that pass ``flt``; nodes left
    without a GPU are skipped."""
    for node in sorted(state.nodes.values(), key=lambda n: (n.pool, n.name)):
        if (flt.pool and node.pool != flt.pool) or (flt.node and flt.node not in node.name):
            continue
        cells = []
        for name in node.gpus:
            gpu = state.gpus.get(name)
            if gpu is None or (flt.model and gpu.spec.model != flt.model):
                continue
            share = used_share(gpu)
            if _keep(gpu, share, node, flt.show):
                cells.append(Cell(name=name, model=gpu.spec.model, share_class=share_class(share),
                                  used_pct=round(100 * share), allocations=len(gpu.charges), phase=gpu.phase))
        if cells:
            yield NodeGroup(name=node.name, pool=node.pool, phase=node.phase, lost=node.phase != READY,
                            cells=cells)


def node(state: ClusterState, name: str) -> NodeState | None:
    """The node record, or None."""
    return state.nodes.get(name)


def node_gpus(state: ClusterState, node_state: NodeState) -> list[GpuState]:
    """The node's GPU records in its GPU order."""
    return [state.gpus[n] for n in node_state.gpus if n in state.gpus]


def allocations_on(state: ClusterState, node_name: str) -> list[AllocationState]:
    """Granted allocations placed on ``node_name``, by allocation id."""
    return sorted((a for a in state.allocations.values() if a.status == GRANTED and a.node == node_name),
                  key=lambda a: a.spec.allocation_id)


def allocation(state: ClusterState, allocation_id: str) -> AllocationState | None:
    """The live (granted or queued) allocation, or None."""
    return state.allocations.get(allocation_id)


class Waiting(msgspec.Struct, frozen=True, kw_only=True):
    """A queued request in grant order: rank (1 = next), record, its current reason (code and
    text of ``reasons.current``; empty when not computed) and, for a capacity reason, what each
    filter removes now (``PhaseFilter removed 2, ...``: ``reasons.filters_now``; the event and the
    reason keep only the summary, the counts are computed when someone looks)."""

    rank: int
    allocation: AllocationState
    code_now: str
    explanation: str
    filters_now: str
    waiting_since: datetime


def queue(state: ClusterState, *, offset: int = 0, limit: int = 100, explain: int = 50) -> tuple[list[Waiting], int]:
    """Queued requests ranked in grant order (priority, QoS, a share's rank in a pool with shares,
    then arrival; ``reasons.queued``), ``limit`` from
    ``offset``, and the total. The first ``explain`` of the page carry their current reason, the
    one the API gives (``reasons.current``: the request decided again now, nothing written; cost
    one ``decide`` each); the rest empty strings."""
    waiting = reasons.queued(state)
    out: list[Waiting] = []
    explainer = reasons.explainer()  # one index for the page, not one per reason
    for rank, record in enumerate(waiting[offset:offset + limit], start=offset + 1):
        now = reasons.current(state, record.spec, explainer) if len(out) < explain else None
        counts = reasons.filters_now(state, record.spec, explainer) if now and now.code == "capacity" else ()
        out.append(Waiting(rank=rank, allocation=record, code_now=now.code if now else "",
                           explanation=now.reason if now else "",
                           filters_now=", ".join(f"{f.name} removed {f.removed}" for f in counts if f.removed),
                           waiting_since=record.requested_at))
    return out, len(waiting)


def position(state: ClusterState) -> int:
    """The last log position folded into the projection."""
    return state.position
