"""Small hand-made clusters for the trace tests: nodes as RegisterNode, pods as TracePod."""

from __future__ import annotations

from datetime import UTC, datetime

from events.intents import ConfigurePool, RegisterNode, RequestAllocation
from events.values import GpuSpec, PoolConfig, Resources
from services.allocator.domain import ClusterState, process
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


def cluster(strategy: str, *nodes: RegisterNode) -> ClusterState:
    """A fresh state with pool ``p`` placed by ``strategy`` and ``nodes`` registered."""
    state = ClusterState.empty()
    process(state, ConfigurePool(intent_id="cfg", pool=POOL, config=PoolConfig(placement=strategy)), NOW)
    for n in nodes:
        process(state, n, NOW)
    return state


def request(state: ClusterState, p: TracePod) -> tuple[str, tuple[str, ...]] | None:
    """Place ``p`` through ``process``; (node, GPUs) when granted, else None."""
    event = process(state, RequestAllocation(intent_id=f"req-{p.name}", spec=p.spec(pool=POOL)), NOW)[0]
    node_name = getattr(event, "node", None)
    return (node_name, tuple(event.gpus)) if node_name and hasattr(event, "gpus") else None
