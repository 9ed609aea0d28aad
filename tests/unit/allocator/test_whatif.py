"""What-if replay (services/allocator/api/whatif): the baseline equals the log, an unchanged
alternative differs in nothing, and a hand-made history gives the answer known in advance."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from events import intents as it
from events.values import AllocationSpec, PoolConfig
from services.allocator.api.whatif import changes
from services.allocator.api.whatif.changes import Alternative, ChangeError
from services.allocator.api.whatif.engine import Replay, WhatIfReport, WindowTooLarge, whatif
from services.allocator.api.whatif.meter import Meter
from services.allocator.domain import profile
from tests.unit.allocator.builders import Gi, a_gpu, a_quota, res
from tests.unit.allocator.whatif_history import T0, Recorder, history


def _run(r: Recorder, *alternatives: Alternative, since_s: float = 0, pool: str | None = "p",
         max_intents: int | None = None) -> WhatIfReport:
    replay = Replay(since=T0 + timedelta(seconds=since_s), until=None, pool=pool, alternatives=alternatives,
                    max_intents=max_intents)
    return asyncio.run(whatif(r.store, replay))


def _window_kinds(r: Recorder, since_s: float) -> set[str]:
    kinds = set()
    for row in r.store.rows:
        kinds.add(row.type)
        if row.type == "allocation_granted" and b'"partitioned"' in row.data:
            kinds.add("partition")
    del since_s
    return kinds


@pytest.mark.parametrize("strategy", sorted(profile.STRATEGIES))
def test_the_baseline_replay_equals_the_log_for_every_strategy(strategy: str) -> None:
    kinds: set[str] = set()
    for seed in (1, 2):
        r = history(seed, strategy=strategy)
        report = _run(r, Alternative(), Alternative(strategy=strategy), since_s=120)
        assert report.fairness.mismatches == 0, report.fairness.examples
        assert report.intents > 50 and report.first_position > 1
        assert [c.differing for c in report.comparisons] == [0, 0]
        assert [run.dropped for run in report.runs] == [0, 0, 0]
        assert report.runs[1].summary == report.runs[0].summary
        kinds |= _window_kinds(r, 120)
    assert {"allocation_preempted", "gang_placed", "partition", "allocation_queued"} <= kinds


def test_every_intent_kind_is_rebuilt_and_a_window_from_the_start_equals_the_log() -> None:
    r = history(3, strategy="fgd-strand", steps=240)
    report = _run(r, since_s=0)
    assert report.fairness.mismatches == 0, report.fairness.examples
    assert report.first_position == 1 and report.last_position == len(r.store.rows)
    rejected = sum(1 for row in r.store.rows if row.type == "intent_rejected")
    assert report.not_replayed == rejected > 0
    assert report.intents + report.not_replayed == len({row.intent_id for row in r.store.rows})


def test_a_log_the_code_would_not_write_is_reported_as_a_mismatch() -> None:
    r = history(7, strategy="node-compact-gpu-low-load", steps=80)
    grants = [row for row in r.store.rows if row.type == "allocation_granted" and b'"n2-g0"' in row.data
              and row.position > 60]
    row = grants[0]
    row.data = row.data.replace(b'"n2-g0"', b'"n2-g3"')  # as if another rule had picked the GPU
    report = _run(r, since_s=0)
    assert report.fairness.mismatches >= 1
    assert report.fairness.examples[0].startswith(f"intent {row.intent_id} at position ")


def test_until_ends_the_window_before_the_first_intent_at_or_after_it() -> None:
    r = history(8, strategy="best-fit", steps=120)
    since, until = T0 + timedelta(seconds=100), T0 + timedelta(seconds=400)
    groups = {row.intent_id for row in r.store.rows
              if since <= r.store_times[row.position] < until}
    replay = Replay(since=since, until=until, pool="p", alternatives=[])
    report = asyncio.run(whatif(r.store, replay))
    assert report.intents + report.not_replayed == len(groups) > 10
    assert report.until == until and report.fairness.mismatches == 0


def test_the_measures_kept_incrementally_equal_a_recount_at_the_end() -> None:
    r = history(6, strategy="best-fit", steps=240)
    replay = Replay(since=T0 + timedelta(seconds=60), until=None, pool="p",
                    alternatives=[Alternative(strategy="fgd", remove_nodes=("n2",),
                                              add_nodes=(changes.AddNodes(count=2, model="L4"),))])
    report = asyncio.run(whatif(r.store, replay))
    assert report.fairness.mismatches == 0
    assert any(row.type in ("node_removed", "gpu_phase_changed", "node_registered") for row in r.store.rows)
    for run in replay.runs:
        busy, used, gpus, capacity = run.meter.totals()
        assert (busy, used, gpus, capacity) == Meter(run.state, "p", T0).totals()
        assert gpus > 0 and 0 <= busy <= gpus and 0 <= used <= capacity


def _preemption_history() -> Recorder:
    """Two 100-TFLOPS GPUs on two nodes: a low pod holds 80 on n1, a critical one 80 on n2 (it
    cannot be preempted by another critical pod). At t=10 a critical pod asking 60 arrives: it
    preempts the low pod, or, with preemption off, waits until n2's pod ends at t=70."""
    r = Recorder()
    r.send(it.ConfigurePool(intent_id=r.next_id(), pool="p", config=PoolConfig(preemption="cluster")))
    r.send(it.RegisterNode(intent_id=r.next_id(), node="n1", pool="p", gpus=(a_gpu("g1", 100, 16 * Gi, model="A100"),)))
    r.send(it.RegisterNode(intent_id=r.next_id(), node="n2", pool="p", gpus=(a_gpu("g2", 100, 16 * Gi, model="A100"),)))
    for uid, qos in (("low", "low"), ("busy", "critical")):
        spec = AllocationSpec(allocation_id=uid, namespace="a", pod=uid, pool="p", request=res(80, 8 * Gi),
                              limit=res(80, 8 * Gi), qos=qos)
        r.send(it.RequestAllocation(intent_id=r.next_id(), spec=spec))
    r.tick(10)
    critical = AllocationSpec(allocation_id="crit", namespace="b", pod="crit", pool="p", request=res(60, 8 * Gi),
                              limit=res(60, 8 * Gi), qos="critical")
    r.send(it.RequestAllocation(intent_id=r.next_id(), spec=critical))
    r.tick(60)
    r.send(it.ReleaseAllocation(intent_id=r.next_id(), allocation_id="busy", reason="finished"))
    r.tick(10)
    r.send(it.RegisterNode(intent_id=r.next_id(), node="n1", pool="p", gpus=(a_gpu("g1", 100, 16 * Gi, model="A100"),)))
    r.tick(20)
    r.send(it.ReleaseAllocation(intent_id=r.next_id(), allocation_id="crit", reason="finished"))
    return r


def test_preemption_off_makes_the_critical_pod_wait_until_a_gpu_frees() -> None:
    r = _preemption_history()
    assert any(row.type == "allocation_preempted" for row in r.store.rows)
    report = _run(r, Alternative(preemption="off"), since_s=5)
    assert report.fairness.mismatches == 0
    base, off = report.runs
    assert base.summary.preemptions == 1 and off.summary.preemptions == 0
    (diff,) = report.comparisons[0].first
    assert diff.allocation_id == "crit"
    assert diff.baseline == "granted at once on n1"
    assert diff.alternative == "granted after 60 s on n2"
    assert off.summary.wait_s_by_namespace["b"] == {"count": 1, "p50": 60.0, "p95": 60.0, "p99": 60.0}
    assert base.summary.wait_s_by_namespace["b"]["p99"] == 0.0
    assert off.summary.requests == {"granted": 0, "queued": 1, "rejected": 0, "waiting_at_end": 0}
    assert base.summary.requests == {"granted": 1, "queued": 0, "rejected": 0, "waiting_at_end": 0}
    assert off.dropped == 0 and report.comparisons[0].differing == 1


def test_a_release_of_an_allocation_the_alternative_never_granted_is_dropped() -> None:
    r = Recorder()
    r.send(it.RegisterNode(intent_id=r.next_id(), node="n1", pool="p", gpus=(a_gpu("g1", 100, 16 * Gi),)))
    r.send(it.SetQuota(intent_id=r.next_id(), namespace="a", spec=a_quota(req=(1000, 100 * Gi))))
    spec = AllocationSpec(allocation_id="x", namespace="a", pod="x", pool="p", request=res(50, Gi), limit=res(50, Gi))
    r.send(it.RequestAllocation(intent_id=r.next_id(), spec=spec))
    r.tick(5)
    r.send(it.ReleaseAllocation(intent_id=r.next_id(), allocation_id="x"))
    report = _run(r, Alternative(quotas=(changes.QuotaCap(namespace="a", milli_tflops=10_000),)))
    base, capped = report.runs
    assert base.summary.requests["granted"] == 1 and capped.summary.requests["queued"] == 1
    assert capped.dropped == 0  # x was queued there: its release takes it out of the queue
    (diff,) = report.comparisons[0].first
    assert diff.alternative.startswith("left the queue after 5 s")
    assert "quota" in diff.why


def test_added_nodes_shorten_the_wait_and_a_removed_node_drops_its_reports() -> None:
    r = _preemption_history()
    report = _run(r, Alternative(preemption="off", add_nodes=(changes.AddNodes(count=1, model="A100"),)),
                  Alternative(remove_nodes=("n1",)), since_s=5)
    assert report.fairness.mismatches == 0
    more, fewer = report.runs[1], report.runs[2]
    assert more.summary.preemptions == 0 and more.summary.wait_s["p99"] == 0.0
    assert fewer.summary.requests == {"granted": 0, "queued": 1, "rejected": 0, "waiting_at_end": 0}
    assert fewer.dropped == 1  # n1's report at t=80
    assert fewer.summary.wait_s["p50"] == 60.0
    with pytest.raises(ChangeError, match="no node of GPU model 'H100'"):
        _run(r, Alternative(add_nodes=(changes.AddNodes(count=1, model="H100"),)))
    with pytest.raises(ChangeError, match="no node 'nope'"):
        _run(r, Alternative(remove_nodes=("nope",)))


def test_the_window_bound_and_a_window_after_the_log() -> None:
    r = history(4, strategy="best-fit", steps=60)
    with pytest.raises(WindowTooLarge):
        _run(r, max_intents=5)
    empty = _run(r, Alternative(strategy="fgd"), since_s=10**7)
    assert empty.intents == 0 and empty.fairness.mismatches == 0 and empty.comparisons[0].differing == 0


@pytest.mark.parametrize(("value", "says"), [
    ("team-a", "NAMESPACE=TFLOPS"), ("Team_A=1", "Team_A"), ("a=-1", "'a=-1'"), ("a=1,xyz", "xyz"),
])
def test_bad_quota_changes_name_the_field_and_value(value: str, says: str) -> None:
    with pytest.raises(ChangeError, match=says) as caught:
        changes.quota(value)
    assert caught.value.field == "quota"


def test_change_parsing() -> None:
    assert changes.quota("team-a=100,320Gi") == changes.QuotaCap(namespace="team-a", milli_tflops=100_000,
                                                                 vram_bytes=320 * Gi)
    assert changes.nodes("+3:A100") == changes.AddNodes(count=3, model="A100")
    assert changes.nodes("-node-7") == "node-7"
    for bad in ("+0:A100", "3:A100", "-", "-Bad_Name"):
        with pytest.raises(ChangeError):
            changes.nodes(bad)
    with pytest.raises(ChangeError, match="strategy must be one of"):
        changes.strategy("fastest")
    with pytest.raises(ChangeError, match="preemption must be one of cluster, namespace, off"):
        changes.preemption("never")
    alts = changes.alternatives(strategies=["fgd", "best-fit"], preemption_scope="off", quotas=[], node_changes=[])
    assert [a.name() for a in alts] == ["strategy=fgd preemption=off", "strategy=best-fit preemption=off"]
    with pytest.raises(ChangeError, match="nodes: at most 64 values") as caught:
        changes.alternatives(strategies=[], preemption_scope=None, quotas=[], node_changes=["-n"] * 65)
    assert caught.value.field == "nodes"
    (none,) = changes.alternatives(strategies=[], preemption_scope=None, quotas=[], node_changes=[])
    assert none.name() == "recorded"
