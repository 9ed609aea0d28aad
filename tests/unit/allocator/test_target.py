"""The learned target workload (domain/target.py): adopted at an epoch crossing only when the
pool's requests moved away from the current mix, part of the snapshot, and what FGD scores with."""

from __future__ import annotations

from events import decisions as ev
from events.values import PoolConfig
from services.allocator.domain import ClusterState, Scheduler, decode_snapshot, digest, encode_snapshot, evolve
from services.allocator.domain.plugins.workload import DEFAULT_WORKLOAD
from services.allocator.domain.target import EPOCH, WINDOW, distance, mix_of
from services.allocator.domain.taskclass import TaskClass
from tests.unit.allocator.builders import T0, a_request


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
