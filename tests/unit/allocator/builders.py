"""Readable test data for the allocation domain: GPUs, nodes, requests and a driver that records events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from events import decisions as ev
from events import intents as it
from events.values import (
    AllocationSpec,
    GpuSpec,
    PoolConfig,
    QuotaAmount,
    QuotaSpec,
    Resources,
    ShareAmount,
    SharePool,
    ShareSpec,
)
from services.allocator.domain import ClusterState, Scheduler, digest, evolve, explain, process

Gi = 2**30
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def tf(value: float) -> int:
    """TFLOPS -> milli-TFLOPS."""
    return round(value * 1000)


def res(tflops: float = 0, vram: int = 0, *, percent: float = 0) -> Resources:
    """Resources from TFLOPS, bytes and percent."""
    return Resources(milli_tflops=tf(tflops), vram_bytes=vram, compute_milli_percent=round(percent * 1000))


def a_gpu(name: str, tflops: float, vram: int, *, model: str = "A100", phase: str = "Running", index: int | None = None,
          mode: str = "", used_by: str = "", vendor: str = "NVIDIA") -> GpuSpec:
    """A GPU spec with capacity ``tflops`` TFLOPS and ``vram`` bytes."""
    return GpuSpec(name=name, capacity=res(tflops, vram), model=model, phase=phase, index=index,
                   isolation_mode=mode, used_by=used_by, vendor=vendor)


def a_request(uid: str, tflops: float = 0, vram: int = 0, *, count: int = 1, pool: str = "test-pool",
              ns: str = "default", limit: Resources | None = None, percent: float = 0, **kw: object) -> AllocationSpec:
    """An allocation spec with request = limit unless ``limit`` is given."""
    request = res(tflops, vram, percent=percent)
    kw.setdefault("pod", uid)
    return AllocationSpec(allocation_id=uid, namespace=ns, pool=pool, request=request,
                          limit=request if limit is None else limit, gpu_count=count, **kw)  # type: ignore[arg-type]


def a_quota(*, req: tuple[float, int] | None = None, lim: tuple[float, int] | None = None,
            workers: int | None = None, **kw: object) -> QuotaSpec:
    """A quota with total requests/limits (TFLOPS, bytes); ``lim`` defaults to ``req``."""
    lim = lim if lim is not None else req
    total_req = QuotaAmount(milli_tflops=tf(req[0]), vram_bytes=req[1]) if req else None
    total_lim = QuotaAmount(milli_tflops=tf(lim[0]), vram_bytes=lim[1]) if lim else None
    return QuotaSpec(total_requests=total_req, total_limits=total_lim, max_workers=workers, **kw)  # type: ignore[arg-type]


def a_share(*namespaces: str, pool: str = "test-pool", gpus: int | None = None, tflops: float | None = None,
            vram: int | None = None, borrow: ShareAmount | None = None, lend: ShareAmount | None = None,
            parent: str = "", weight: int = 1) -> ShareSpec:
    """A share of ``namespaces`` guaranteed ``gpus`` GPUs, ``tflops`` TFLOPS and ``vram`` bytes in
    ``pool`` (None: unset), with optional borrowing and lending limits."""
    guaranteed = ShareAmount(gpus=gpus, milli_tflops=None if tflops is None else tf(tflops), vram_bytes=vram)
    terms = SharePool(pool=pool, guaranteed=guaranteed, borrowing_limit=borrow, lending_limit=lend)
    return ShareSpec(namespaces=namespaces, parent=parent, weight=weight, pools=(terms,))


class Cluster:
    """Drives ``process`` like the allocator does (one long-lived Scheduler) and keeps every
    emitted event for replay checks."""

    def __init__(self, scheduler: Scheduler | None = None) -> None:
        self.state = ClusterState.empty()
        self.scheduler = scheduler or Scheduler()
        self.events: list[ev.AnyEvent] = []
        self.now = T0
        self._n = 0

    def _id(self) -> str:
        self._n += 1
        return f"intent-{self._n}"

    def send(self, intent: it.AnyIntent) -> list[ev.AnyEvent]:
        """Process one intent and return its events."""
        out = process(self.state, intent, self.now, self.scheduler)
        self.events.extend(out)
        return out

    def tick(self, seconds: float) -> None:
        """Advance the clock passed to decisions."""
        self.now += timedelta(seconds=seconds)

    def node(self, name: str, pool: str, *gpus: GpuSpec, **kw: object) -> list[ev.AnyEvent]:
        """Register (or re-report) a node."""
        return self.send(it.RegisterNode(intent_id=self._id(), node=name, pool=pool, gpus=gpus, **kw))  # type: ignore[arg-type]

    def pool(self, pool: str, **kw: object) -> list[ev.AnyEvent]:
        """Configure a pool."""
        return self.send(it.ConfigurePool(intent_id=self._id(), pool=pool, config=PoolConfig(**kw)))  # type: ignore[arg-type]

    def quota(self, ns: str, spec: QuotaSpec) -> list[ev.AnyEvent]:
        """Set a namespace quota."""
        return self.send(it.SetQuota(intent_id=self._id(), namespace=ns, spec=spec))

    def share(self, name: str, spec: ShareSpec) -> list[ev.AnyEvent]:
        """Create or replace a share."""
        return self.send(it.SetShare(intent_id=self._id(), name=name, spec=spec))

    def remove_share(self, name: str) -> list[ev.AnyEvent]:
        """Remove a share."""
        return self.send(it.RemoveShare(intent_id=self._id(), name=name))

    def request(self, spec: AllocationSpec) -> ev.AnyEvent:
        """Request an allocation; returns the outcome event (the first one)."""
        return self.send(it.RequestAllocation(intent_id=self._id(), spec=spec))[0]

    def filters_now(self, uid: str) -> dict[str, int]:
        """GPUs each filter removes for allocation ``uid``'s request now (the per-filter counts
        ``why`` computes on demand; a queued event leaves them out)."""
        return {f.name: f.removed for f in explain(self.state, self.state.allocations[uid].spec)}

    def release(self, uid: str) -> list[ev.AnyEvent]:
        """Release an allocation; returns every event (release + grants from the queue)."""
        return self.send(it.ReleaseAllocation(intent_id=self._id(), allocation_id=uid))

    def resize(self, uid: str, request: Resources, limit: Resources) -> ev.AnyEvent:
        """Resize an allocation; returns the outcome."""
        return self.send(it.ResizeAllocation(intent_id=self._id(), allocation_id=uid, request=request,
                                             limit=limit))[0]

    def avail(self, gpu: str) -> tuple[int, int]:
        """(available milli-TFLOPS, available bytes) of a GPU."""
        g = self.state.gpus[gpu]
        return g.available_milli_tflops, g.available_vram_bytes

    def replayed_digest(self) -> str:
        """Digest of a fresh state folded from every event emitted so far."""
        fresh = ClusterState.empty()
        for event in self.events:
            evolve(fresh, event)
        return digest(fresh)


def env_cluster(**pool_kw: object) -> Cluster:
    """Inventory ENV (test-pool: gpu-1,2,5,6 on node-1; gpu-3 other-pool; gpu-4 Pending)."""
    c = Cluster()
    if pool_kw:
        c.pool("test-pool", **pool_kw)
    c.node("node-1", "test-pool", a_gpu("gpu-1", 100, 16 * Gi), a_gpu("gpu-2", 100, 32 * Gi),
           a_gpu("gpu-5", 100, 16 * Gi), a_gpu("gpu-6", 100, 16 * Gi))
    c.node("node-2", "other-pool", a_gpu("gpu-3", 120, 24 * Gi))
    c.node("node-3", "test-pool", a_gpu("gpu-4", 150, 48 * Gi, model="H100", phase="Pending"))
    return c


def three_half_used_nodes() -> Cluster:
    """Three nodes of two GPUs, a 30-TFLOPS share of workload w<n> on each (spread by low-load-first);
    the pool then packs (node-compact-gpu-low-load): a campaign empties two nodes."""
    c = Cluster()
    c.pool("p", placement="low-load-first")
    for n in range(3):
        c.node(f"n{n}", "p", *(a_gpu(f"n{n}-g{g}", 100, 16 * Gi, index=g) for g in range(2)))
    for n in range(3):
        c.request(a_request(f"a{n}", 30, Gi, pool="p", workload=f"w{n}"))
    c.pool("p", placement="node-compact-gpu-low-load")
    return c


def borrowed_pool(qos: str = "medium", **pool_kw: object) -> Cluster:
    """test-pool: one node of four whole GPUs (gpu-0..3, 100 TFLOPS, 40 GiB); share alpha (ns-a,
    guarantee 1 GPU) holds all four with ``qos`` work a0..a3 (a1..a3 borrowed); share beta (ns-b,
    guarantee 3 GPUs) holds none, so a beta request reclaims."""
    c = Cluster()
    c.pool("test-pool", **pool_kw)
    c.node("node-0", "test-pool", *(a_gpu(f"gpu-{i}", 100, 40 * Gi) for i in range(4)))
    c.share("alpha", a_share("ns-a", gpus=1))
    c.share("beta", a_share("ns-b", gpus=3))
    for i in range(4):
        c.request(a_request(f"a{i}", 100, 40 * Gi, ns="ns-a", qos=qos))
    return c
