"""The fill-up experiment's probe: ``run_seed(before=...)`` sees each request once, before it is decided."""

from __future__ import annotations

from events.values import AllocationSpec
from services.allocator.domain import ClusterState
from services.trace import experiment
from services.trace.workload import tune, typical
from tests.unit.trace.cluster import node, pod


def test_before_sees_every_request_on_the_state_it_is_decided_on() -> None:
    nodes = [node("a", gpus=2, cpu=8000), node("b", gpus=1, cpu=4000)]
    pods = [pod("whole", milli=1000), pod("half", milli=500), pod("pair", milli=1000, count=2)]
    seen: list[tuple[str, int]] = []

    def probe(state: ClusterState, spec: AllocationSpec) -> None:
        assert spec.allocation_id not in state.allocations
        seen.append((spec.allocation_id, len(state.allocations)))

    run = experiment.run_seed(nodes, pods, strategy="fgd", seed=42, target=typical(pods), before=probe)
    tuned = tune(pods, capacity_milli=3000, seed=42)
    assert [a for a, _ in seen] == [f"{i}-{p.name}" for i, p in enumerate(tuned)]
    after = [n for _, n in seen[1:]]
    for i, (used, n_after) in enumerate(zip(run.used, after, strict=False)):
        granted = used > (run.used[i - 1] if i else 0)
        assert n_after - seen[i][1] == int(granted)  # the next request sees this one's grant, if any
