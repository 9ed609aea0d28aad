"""The learned target workload (domain/target.py): adopted at an epoch crossing only when the
pool's requests moved away from the current mix, part of the snapshot, and what FGD scores with."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from events import decisions as ev
from events import intents as it
from events.values import AllocationSpec, PoolConfig, Resources
from services.allocator.domain import ClusterState, Scheduler, decode_snapshot, digest, encode_snapshot, evolve
from services.allocator.domain.model import RecentRequests, RequestShape
from services.allocator.domain.need import Need
from services.allocator.domain.strategies.paper import cpu_only
from services.allocator.domain.strategies.workload import DEFAULT_WORKLOAD, typical_workload
from services.allocator.domain.target import EPOCH, WINDOW, common_capacity, distance, learned, mix_of, pod_key
from services.allocator.domain.taskclass import TaskClass
from tests.unit.allocator.builders import T0, Cluster, a_gpu, a_request

GIB = 1 << 30
H100 = Resources(milli_tflops=989_000, vram_bytes=80 * GIB)


def _arrive(state: ClusterState, n: int, *, percent: float, cpu: int, pool: str = "p") -> None:
    for i in range(n):
        spec = a_request(f"{pool}-{percent}-{cpu}-{i}", percent=percent, pool=pool, cpu_milli=cpu)
        evolve(state, ev.AllocationQueued(at=T0, spec=spec, code="capacity", reason="test"))


def test_a_shifted_workload_is_adopted_at_the_epoch_crossing() -> None:
    state = ClusterState.empty()
    _arrive(state, EPOCH - 1, percent=30, cpu=2000)
    assert mix_of(state, "p") is DEFAULT_WORKLOAD  # not yet an epoch
    _arrive(state, 1, percent=30, cpu=2000)
    mix = mix_of(state, "p")
    assert [(t.milli, t.count, t.cpu_milli, t.weight) for t in mix] == [(300, 1, 2000, 1.0)]
    assert mix_of(state, "other") is DEFAULT_WORKLOAD
    twin = decode_snapshot(encode_snapshot(state))
    assert mix_of(twin, "p") == mix and digest(twin) == digest(state)


def test_noise_around_the_current_mix_keeps_it() -> None:
    state = ClusterState.empty()
    _arrive(state, EPOCH, percent=30, cpu=2000)
    first = mix_of(state, "p")
    _arrive(state, EPOCH // 10, percent=50, cpu=2000)  # 10 % of an epoch elsewhere: below the shift
    _arrive(state, EPOCH - EPOCH // 10, percent=30, cpu=2000)
    assert mix_of(state, "p") is first
    _arrive(state, WINDOW, percent=50, cpu=2000)  # the whole window moved to the new class
    assert [(t.milli, t.weight) for t in mix_of(state, "p")] == [(500, 1.0)]


def test_distance_is_total_variation() -> None:
    assert distance(DEFAULT_WORKLOAD, DEFAULT_WORKLOAD) == 0
    one = (TaskClass(weight=1.0, milli=100, count=1),)
    assert abs(distance(one, DEFAULT_WORKLOAD) - 1.0) < 1e-9


def test_the_scheduler_scores_with_the_adopted_mix() -> None:
    state = ClusterState.empty()
    evolve(state, ev.PoolConfigured(at=T0, pool="p", config=PoolConfig(placement="fgd")))
    scheduler = Scheduler()
    assert scheduler.strategy(state, "p").workload is DEFAULT_WORKLOAD  # type: ignore[union-attr]
    _arrive(state, EPOCH, percent=30, cpu=2000)
    assert scheduler.strategy(state, "p").workload is mix_of(state, "p")  # type: ignore[union-attr]


def _shape_of(spec: AllocationSpec) -> tuple[int, int, int, tuple[str, ...]]:
    """The class ``spec`` counts as in M, through the shape evolve records."""
    state = ClusterState.empty()
    evolve(state, ev.AllocationQueued(at=T0, spec=spec, code="capacity", reason="test"))
    return pod_key(state.recent[spec.pool].shapes[-1], H100)


def test_the_share_is_compute_else_vram_and_shared_takes_whole_gpus() -> None:
    assert _shape_of(a_request("t", 98.9, 0, pool="p"))[1:3] == (100, 1)
    assert _shape_of(a_request("v", 0, 20 * GIB, count=2, pool="p"))[1:3] == (250, 2)
    assert _shape_of(a_request("s", 98.9, GIB, pool="p", isolation="shared"))[1:3] == (1000, 1)
    assert _shape_of(a_request("c", pool="p", cpu_milli=4000)) == (4000, 0, 0, ())
    unmeasured = RequestShape(0, 0, 0, 1, (), GIB)
    assert pod_key(unmeasured, Resources())[1:3] == (1000, 1)  # a pool with no GPU yet: a whole GPU


@given(tflops=st.sampled_from([0, 0.001, 10, 2000]), vram=st.sampled_from([0, 1, GIB, 200 * GIB]),
       percent=st.sampled_from([0, 0.001, 50, 100]), isolation=st.sampled_from(["soft", "hard", "shared"]))
def test_a_request_is_cpu_only_in_m_exactly_when_the_strategies_call_it_cpu_only(
        tflops: float, vram: int, percent: float, isolation: str) -> None:
    spec = a_request("x", 0 if percent else tflops, vram, percent=percent, pool="p", isolation=isolation)
    _, milli, count, _ = _shape_of(spec)
    assert (count == 0) == cpu_only(Need(spec))
    assert 0 <= milli <= 1000 and (milli == 0) == (count == 0)


def test_the_learned_mix_measures_vram_only_requests_against_the_pools_gpus() -> None:
    cluster = Cluster()
    cluster.node("n1", "p", *(a_gpu(f"g{i}", 100, 16 * GIB) for i in range(2)))
    for i in range(EPOCH):
        evolve(cluster.state, ev.AllocationQueued(at=T0, spec=a_request(f"v{i}", 0, 4 * GIB, pool="p"),
                                                  code="capacity", reason="test"))
    assert [(t.milli, t.count) for t in mix_of(cluster.state, "p")] == [(250, 1)]


SHAPES = st.builds(RequestShape, cpu_milli=st.sampled_from([0, 2000, 8000]),
                   milli_tflops=st.sampled_from([0, 50_000, 989_000]), milli_percent=st.sampled_from([0, 30_000]),
                   count=st.integers(1, 2), models=st.sampled_from([(), ("H100",)]),
                   vram_bytes=st.sampled_from([0, 4 * GIB]), whole=st.booleans())


@given(shapes=st.lists(SHAPES, min_size=1, max_size=60), current=st.sampled_from([None, "first"]))
@settings(max_examples=200, deadline=None)
def test_the_learned_mix_is_the_typical_workload_of_every_requests_pod_key(
        shapes: list[RequestShape], current: str | None) -> None:
    """learned() measures each distinct shape once; its mix is the simulator's rule applied to
    every request's pod key in arrival order (popularity ties in first-appearance order)."""
    cluster = Cluster()
    cluster.node("n1", "p", *(a_gpu(f"g{i}", 989, 80 * GIB) for i in range(2)))
    recent = RecentRequests(arrivals=len(shapes), shapes=list(shapes))
    if current:
        recent.mix = typical_workload(pod_key(s, H100) for s in shapes[: len(shapes) // 2 or 1])
    expected = typical_workload(pod_key(s, H100) for s in shapes)
    base = recent.mix if recent.mix is not None else DEFAULT_WORKLOAD
    assert learned(cluster.state, "p", recent) == (expected if distance(expected, base) > 0.15 else None)


def test_the_common_capacity_follows_the_inventory() -> None:
    """The pool's most common GPU capacity is kept between epochs and recomputed after a node is
    registered, resized or removed."""
    cluster = Cluster()
    cluster.node("n1", "p", *(a_gpu(f"a{i}", 100, 16 * GIB) for i in range(2)))
    assert common_capacity(cluster.state, "p") == Resources(milli_tflops=100_000, vram_bytes=16 * GIB)
    cluster.node("n2", "p", *(a_gpu(f"b{i}", 989, 80 * GIB) for i in range(3)))
    assert common_capacity(cluster.state, "p") == H100
    evolve(cluster.state, ev.GpuCapacityChanged(at=T0, gpu="b0", node="n2", pool="p", capacity=Resources(
        milli_tflops=100_000, vram_bytes=16 * GIB), previous=H100))
    assert common_capacity(cluster.state, "p") == Resources(milli_tflops=100_000, vram_bytes=16 * GIB)
    cluster.send(it.RemoveNode(intent_id="rm", node="n1"))
    assert common_capacity(cluster.state, "p") == H100
    assert common_capacity(cluster.state, "empty") == Resources()
