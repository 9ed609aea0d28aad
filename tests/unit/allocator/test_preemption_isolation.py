"""Preemption under a dynamic isolation policy and hard topology: the dry run sees the lock left by
the allocations that stay, the hard tier filter, and takes GPUs by the topology choice."""

from __future__ import annotations

import msgspec

from events import decisions as ev
from events import intents as it
from events.values import AllocationSpec, GpuSpec
from services.allocator.domain.filters.isolation_policy import lock_of
from services.allocator.domain.trial import Trial
from tests.unit.allocator.builders import Cluster, Gi, a_gpu, a_request


def ask(c: Cluster, spec: AllocationSpec) -> list[ev.AnyEvent]:
    return c.send(it.RequestAllocation(intent_id=f"ask-{spec.allocation_id}", spec=spec))


def _numa(spec: GpuSpec, numa: int) -> GpuSpec:
    return msgspec.structs.replace(spec, numa_node=numa)


def test_a_gpu_locked_by_a_survivor_is_not_taken_by_preempting_only_some_of_its_allocations() -> None:
    c = Cluster()
    c.pool("p", isolation_policy="dynamic", placement="compact-first")
    c.node("n", "p", a_gpu("g", 100, 40 * Gi))
    c.request(a_request("low", 40, Gi, pool="p", qos="low"))
    c.request(a_request("keep", 40, Gi, pool="p", qos="critical"))
    out = ask(c, a_request("hard", 50, Gi, pool="p", qos="high", isolation="hard"))
    assert isinstance(out[-1], ev.AllocationQueued)  # "keep" stays and holds the GPU soft: no victim helps
    assert not any(isinstance(e, ev.AllocationPreempted) for e in out)


def test_preempting_every_allocation_of_a_gpu_unlocks_it_for_another_mode() -> None:
    c = Cluster()
    c.pool("p", isolation_policy="dynamic")
    c.node("n", "p", a_gpu("g", 100, 40 * Gi))
    c.request(a_request("low", 10, Gi, pool="p", qos="low"))
    out = ask(c, a_request("hard", 50, Gi, pool="p", qos="high", isolation="hard"))
    assert [e.allocation_id for e in out if isinstance(e, ev.AllocationPreempted)] == ["low"]
    assert isinstance(out[-1], ev.AllocationGranted) and lock_of(c.state.gpus["g"], c.state.allocations) == "hard"


def test_a_same_mode_preemptor_shares_the_gpu_with_the_allocation_that_stays() -> None:
    c = Cluster()
    c.pool("p", isolation_policy="dynamic")
    c.node("n", "p", a_gpu("g", 100, 40 * Gi))
    c.request(a_request("low", 50, Gi, pool="p", qos="low"))
    c.request(a_request("keep", 40, Gi, pool="p", qos="critical"))
    out = ask(c, a_request("soft", 50, Gi, pool="p", qos="high"))
    assert [e.allocation_id for e in out if isinstance(e, ev.AllocationPreempted)] == ["low"]
    assert isinstance(out[-1], ev.AllocationGranted) and lock_of(c.state.gpus["g"], c.state.allocations) == "soft"


def test_the_dry_run_takes_gpus_by_the_topology_choice_and_honours_the_hard_tier() -> None:
    c = Cluster()
    c.node("n", "p", _numa(a_gpu("g0", 100, 40 * Gi), 1), _numa(a_gpu("g1", 100, 40 * Gi), 0),
           _numa(a_gpu("g2", 100, 40 * Gi), 0))
    spec = a_request("pair", 100, Gi, pool="p", qos="high", count=2)
    need, chain = c.scheduler.prepare(spec)
    strategy = c.scheduler.strategy(c.state, "p")
    fit = Trial(c.state, "n", spec, need, chain, strategy, indexed=True).fits([])
    assert fit is not None and {g.name for g in fit.gpus} == {"g1", "g2"}  # the strategy alone: g0, g1
    c.pool("p", topology="hard", max_topology_tier=0)
    need, chain = c.scheduler.prepare(spec)
    assert Trial(c.state, "n", spec, need, chain, strategy, indexed=True).fits([]) is None
