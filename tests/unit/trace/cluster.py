"""Small hand-made clusters for the trace tests: nodes as RegisterNode, pods as TracePod."""

from __future__ import annotations

from datetime import UTC, datetime

from events.intents import ConfigurePool, RegisterNode, RequestAllocation
from events.values import GpuSpec, PoolConfig, Resources
from services.allocator.domain import ClusterState, Scheduler, process
from services.allocator.domain.strategies.fragmentation import Workload
from services.trace.openb import TracePod

NOW = datetime(2026, 1, 1, tzinfo=UTC)
POOL = "p"
TFLOPS = 18_700
"""milli-TFLOPS of one GPU (a P100 in the discovery model table)."""


def node(name: str, *, gpus: int, cpu: int, model: str = "P100", memory: int = 64 * 2**30) -> RegisterNode:
    """A node of ``gpus`` identical GPUs, ``cpu`` millicores."""
    specs = tuple(GpuSpec(name=f"{name}-gpu-{i}", capacity=Resources(milli_tflops=TFLOPS, vram_bytes=16 * 2**30),
                          model=model, index=i) for i in range(gpus))
    return RegisterNode(intent_id=f"reg-{name}", node=name, pool=POOL, gpus=specs, cpu_milli=cpu,
                        memory_bytes=memory)


def pod(name: str, *, milli: int, count: int = 1, cpu: int = 1000, models: tuple[str, ...] = ()) -> TracePod:
    """A trace pod (count 0: CPU-only)."""
    return TracePod(name=name, cpu_milli=cpu, memory_bytes=2**30, count=count, milli=milli if count else 0,
                    models=models)


class Sim:
    """A state and the Scheduler that decides on it (``target``: fixed target workload of FGD and kin)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.state = ClusterState.empty()
        self.scheduler = scheduler

    def add(self, n: RegisterNode) -> None:
        """Register one more node."""
        process(self.state, n, NOW, self.scheduler)


def cluster(strategy: str, *nodes: RegisterNode, target: Workload | None = None,
            scheduler: Scheduler | None = None) -> Sim:
    """A fresh state with pool ``p`` placed by ``strategy`` and ``nodes`` registered."""
    sim = Sim(scheduler or Scheduler(target=target))
    process(sim.state, ConfigurePool(intent_id="cfg", pool=POOL, config=PoolConfig(placement=strategy)), NOW,
            sim.scheduler)
    for n in nodes:
        sim.add(n)
    return sim


def request(sim: Sim, p: TracePod) -> tuple[str, tuple[str, ...]] | None:
    """Place ``p`` through ``process``; (node, GPUs) when granted, else None."""
    spec = p.spec(pool=POOL)
    event = process(sim.state, RequestAllocation(intent_id=f"req-{p.name}", spec=spec), NOW, sim.scheduler)[0]
    node_name = getattr(event, "node", None)
    return (node_name, tuple(event.gpus)) if node_name and hasattr(event, "gpus") else None
