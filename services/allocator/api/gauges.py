"""Per-pool gauges read from the projection at scrape time (a prometheus-client custom collector).

Names (Prometheus conventions: base units, ``pool`` label): ``gpuledger_pool_capacity_tflops``,
``gpuledger_pool_allocated_tflops``, ``gpuledger_pool_available_tflops`` (TFLOPS, floats),
``gpuledger_pool_capacity_vram_bytes``, ``gpuledger_pool_allocated_vram_bytes``,
``gpuledger_pool_available_vram_bytes``, ``gpuledger_pool_gpus{pool,phase}``,
``gpuledger_pool_nodes{pool,phase}``, ``gpuledger_pool_allocations{pool,status}`` (granted,
queued), ``gpuledger_pool_queued{pool,qos}``, and the idle ones (TensorFusion
GpuAllocator.ListNonUsingNodes): ``gpuledger_pool_idle_nodes{pool}`` (nodes with no granted
allocation), ``gpuledger_pool_idle_node_gpus{pool}`` (the GPUs of those nodes, what giving the nodes
back would free) and ``gpuledger_pool_idle_gpus{pool}`` (GPUs holding no share of any allocation,
on any node; GPUs discovery no longer reports left out). Capacity and available leave out the GPUs discovery
no longer reports (phase Unknown; model.capacity_totals). Cost per scrape: one pass over GPUs, nodes
and live allocations.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from events.values import QOS_LEVELS
from services.allocator.domain.model import GRANTED, MISSING, QUEUED, GpuState, capacity_totals
from services.allocator.domain.state import ClusterState

_RESOURCES = (
    ("capacity_tflops", "TFLOPS of the pool's GPUs"), ("allocated_tflops", "TFLOPS charged to live allocations"),
    ("available_tflops", "TFLOPS free (capacity minus charges, per GPU floored at 0)"),
    ("capacity_vram_bytes", "VRAM of the pool's GPUs"), ("allocated_vram_bytes", "VRAM charged to live allocations"),
    ("available_vram_bytes", "VRAM free (per GPU floored at 0)"),
)


class ProjectionCollector(Collector):
    """Base of collectors whose gauge families are read from the projection ``state()`` returns at
    each scrape (so nothing is described up front); subclasses implement ``collect``."""

    def __init__(self, state: Callable[[], ClusterState]) -> None:
        self._state = state

    def describe(self) -> list[GaugeMetricFamily]:
        """No description up front: families are read at scrape time."""
        return []


class PoolCollector(ProjectionCollector):
    """Yields the per-pool gauges of the projection ``state()`` returns (read at each scrape)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The gauge families of the projection now."""
        state = self._state()
        families = {name: GaugeMetricFamily(f"gpuledger_pool_{name}", text, labels=["pool"])
                    for name, text in _RESOURCES}
        members: dict[str, list[GpuState]] = {}
        for gpu in state.gpus.values():
            members.setdefault(gpu.pool, []).append(gpu)
        totals: dict[str, dict[str, float]] = {}
        for pool, gpus in members.items():
            sums = capacity_totals(gpus)  # GPUs discovery no longer reports are left out
            totals[pool] = {
                "capacity_tflops": sums.capacity.milli_tflops / 1000,
                "allocated_tflops": sums.allocated.milli_tflops / 1000,
                "available_tflops": sums.available.milli_tflops / 1000,
                "capacity_vram_bytes": sums.capacity.vram_bytes, "allocated_vram_bytes": sums.allocated.vram_bytes,
                "available_vram_bytes": sums.available.vram_bytes}
        for pool in sorted(totals):
            for name, family in families.items():
                family.add_metric([pool], totals[pool][name])
        yield from families.values()
        yield _counted("gpuledger_pool_gpus", "GPUs by phase", ["pool", "phase"],
                       Counter((g.pool, g.phase) for g in state.gpus.values()))
        yield _counted("gpuledger_pool_nodes", "Nodes by phase", ["pool", "phase"],
                       Counter((n.pool, n.phase) for n in state.nodes.values()))
        lives = list(state.allocations.values())
        pools = {a.spec.pool for a in lives} | set(totals)
        statuses = Counter((a.spec.pool, a.status) for a in lives)
        yield _counted("gpuledger_pool_allocations", "Live allocations by status", ["pool", "status"],
                       Counter({(p, s): statuses.get((p, s), 0) for p in pools for s in (GRANTED, QUEUED)}))
        queued = Counter((a.spec.pool, a.spec.qos) for a in lives if a.status == QUEUED)
        yield _counted("gpuledger_pool_queued", "Queued requests by QoS", ["pool", "qos"],
                       Counter({(p, q): queued.get((p, q), 0) for p in pools for q in QOS_LEVELS}))
        yield from _idle(state)


def _idle(state: ClusterState) -> Iterator[GaugeMetricFamily]:
    """The idle gauges: every pool with a node or a GPU gets a sample (0 included)."""
    pools = sorted({n.pool for n in state.nodes.values()} | {g.pool for g in state.gpus.values()})
    idle_nodes = [n for n in state.nodes.values() if n.idle_since is not None]
    nodes = Counter(n.pool for n in idle_nodes)
    node_gpus = Counter(n.pool for n in idle_nodes for g in n.gpus if g in state.gpus)
    gpus = Counter(g.pool for g in state.gpus.values() if g.idle and g.phase != MISSING)
    for name, text, counts in (
            ("gpuledger_pool_idle_nodes", "Nodes with no granted allocation (ListNonUsingNodes)", nodes),
            ("gpuledger_pool_idle_node_gpus", "GPUs of the nodes with no granted allocation", node_gpus),
            ("gpuledger_pool_idle_gpus", "GPUs holding no share of any allocation", gpus)):
        family = GaugeMetricFamily(name, text, labels=["pool"])
        for pool in pools:
            family.add_metric([pool], counts.get(pool, 0))
        yield family


def _counted(name: str, text: str, labels: list[str], counts: Counter[tuple[str, str]]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, text, labels=labels)
    for key in sorted(counts):
        family.add_metric(list(key), counts[key])
    return family
