"""Event batches for log tests: a small cluster's life (nodes, quota, grants, queue, resize, release).

Built from event constructors (no ``decide``), folded with the domain's ``evolve`` so that the
state passed to ``append`` is the real projection of exactly these events.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from events import decisions as ev
from events.values import AllocationSpec, GpuSpec, QuotaAmount, QuotaSpec, Resources
from services.allocator.domain import evolve
from services.allocator.domain.state import ClusterState
from services.allocator.ports import DecidedIntent

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
GIB = 1 << 30


def at(minutes: float) -> datetime:
    """``T0`` plus ``minutes``."""
    return T0 + timedelta(minutes=minutes)


def node(name: str, *, pool: str = "default", gpus: int = 2, model: str = "A100",
         minutes: float = 0) -> ev.NodeRegistered:
    """A node with ``gpus`` GPUs of 312 TFLOPS / 80 GiB named ``<node>-gpu<i>``."""
    specs = tuple(GpuSpec(name=f"{name}-gpu{i}", model=model, index=i,
                          capacity=Resources(milli_tflops=312_000, vram_bytes=80 * GIB)) for i in range(gpus))
    return ev.NodeRegistered(at=at(minutes), node=name, pool=pool, gpus=specs)


def spec(alloc: str, *, namespace: str = "team-a", tflops: int = 100_000, vram_gib: int = 10, count: int = 1,
         pool: str = "default", qos: str = "medium") -> AllocationSpec:
    """A request of ``tflops`` milli-TFLOPS and ``vram_gib`` GiB per GPU (limit = 2x request)."""
    request = Resources(milli_tflops=tflops, vram_bytes=vram_gib * GIB)
    limit = Resources(milli_tflops=2 * tflops, vram_bytes=2 * vram_gib * GIB)
    return AllocationSpec(allocation_id=alloc, namespace=namespace, pod=f"pod-{alloc}", pool=pool,
                          request=request, limit=limit, gpu_count=count, qos=qos, workload=f"wl-{alloc}")


def granted(s: AllocationSpec, node_name: str, gpus: list[str], *, minutes: float,
            from_queue: bool = False) -> ev.AllocationGranted:
    """A grant charging the request on each GPU."""
    return ev.AllocationGranted(at=at(minutes), spec=s, node=node_name, gpus=tuple(gpus),
                                charges=tuple(s.request for _ in gpus), from_queue=from_queue)


def released(s: AllocationSpec, node_name: str, gpus: list[str], *, minutes: float) -> ev.AllocationReleased:
    """Release of a granted allocation."""
    return ev.AllocationReleased(at=at(minutes), allocation_id=s.allocation_id, namespace=s.namespace, pod=s.pod,
                                 pool=s.pool, node=node_name, gpus=tuple(gpus), reason="pod deleted")


def story() -> list[DecidedIntent]:
    """Nine intents: two nodes, a quota, grants, a queue then grant, a resize, a rejection, releases."""
    a, b, c, d = spec("a"), spec("b", namespace="team-b", count=2), spec("c", tflops=300_000), spec("d")
    big = spec("big", tflops=999_000)
    quota = QuotaSpec(total_requests=QuotaAmount(milli_tflops=1_000_000, vram_bytes=200 * GIB))
    steps: list[list[ev.AllocationGranted | ev.Event]] = [
        [node("n1"), node("n2", model="H100")],
        [ev.QuotaSet(at=at(1), namespace="team-a", spec=quota)],
        [granted(a, "n1", ["n1-gpu0"], minutes=2)],
        [granted(b, "n2", ["n2-gpu0", "n2-gpu1"], minutes=3)],
        [ev.AllocationQueued(at=at(4), spec=c, reason="no GPU has 300 TFLOPS free", code="capacity")],
        [ev.AllocationRejected(at=at(5), spec=big, reason="bigger than any GPU", code="too_big")],
        [ev.AllocationResized(at=at(6), allocation_id="a", namespace="team-a", pool="default",
                              request=Resources(milli_tflops=50_000, vram_bytes=5 * GIB),
                              limit=Resources(milli_tflops=100_000, vram_bytes=10 * GIB),
                              charges=(Resources(milli_tflops=50_000, vram_bytes=5 * GIB),))],
        [released(b, "n2", ["n2-gpu0", "n2-gpu1"], minutes=30),
         granted(c, "n2", ["n2-gpu0"], minutes=30, from_queue=True)],
        [granted(d, "n1", ["n1-gpu1"], minutes=31), released(d, "n1", ["n1-gpu1"], minutes=45)],
    ]
    return [DecidedIntent(intent_id=f"intent-{i}", stream_seq=i + 1, events=tuple(events))  # type: ignore[arg-type]
            for i, events in enumerate(steps)]


def fold_batch(state: ClusterState, batch: list[DecidedIntent]) -> ClusterState:
    """Evolve ``state`` through every event of ``batch`` (what the allocator does before append)."""
    for decided in batch:
        for event in decided.events:
            state = evolve(state, event)
    return state
