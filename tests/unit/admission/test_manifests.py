"""Four TensorFusion-style manifests end to end: YAML -> pod -> compose -> RequestAllocation ->
the domain's ``process`` against a small inventory (the allocator's own decision)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from events import decisions, intents
from events.values import GangSpec, GpuSpec, Resources
from services.allocator.domain import ClusterState, process
from services.podspec import (
    ComposeContext,
    PoolDefaults,
    canonical_annotations,
    compose,
    keys,
    pod_from_manifest,
    workload_replicas,
)

HERE = Path(__file__).parent / "manifests"
GI = 2**30
NOW = datetime(2026, 1, 1, tzinfo=UTC)
A100 = Resources(milli_tflops=312_000, vram_bytes=40 * GI)
ASCEND = Resources(milli_tflops=22_000, vram_bytes=24 * GI)


def _inventory() -> ClusterState:
    state = ClusterState.empty()
    nodes = [("node-a", "shared-pool", "A100", A100), ("node-b", "shared-pool", "A100", A100),
             ("node-c", "default-pool", "A100", A100),
             ("node-d", "tensor-fusion-shared", "Ascend 310P3", ASCEND),
             ("node-e", "shared-tensor-fusion-cluster-shared", "A100", A100)]
    for node, pool, model, capacity in nodes:
        gpus = (GpuSpec(name=f"{node}-gpu0", capacity=capacity, model=model, index=0,
                        vendor="Ascend" if "Ascend" in model else "NVIDIA"),)
        process(state, intents.RegisterNode(intent_id=f"reg-{node}", node=node, pool=pool, gpus=gpus), NOW)
    return state


def _pods(name: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(the pod its controller would create, the workload) for every workload in a manifest file."""
    docs = yaml.safe_load_all((HERE / name).read_text())
    return [(pod_from_manifest(doc), doc) for doc in docs if doc["kind"] != "WorkloadProfile"]


def _decide(state: ClusterState, spec: Any) -> decisions.AnyEvent:
    events = process(state, intents.RequestAllocation(intent_id=f"admit-{spec.allocation_id}", spec=spec), NOW)
    return next(e for e in events
                if getattr(e, "spec", None) is not None and e.spec.allocation_id == spec.allocation_id)


def test_e1_smoke_test_takes_one_whole_idle_a100() -> None:
    state = _inventory()
    (pod, _), = _pods("e1_smoke.yaml")
    spec = compose(pod, context=ComposeContext(model_capacity={"A100": A100}, review_uid="e1-uid"))
    assert (spec.workload, spec.pool, spec.isolation, spec.gpu_count, spec.qos) == (
        "tensor-fusion-smoke", "shared-pool", "shared", 1, "high")
    assert spec.request == spec.limit == A100
    assert canonical_annotations(spec)[keys.IS_LOCAL_GPU] == "false"
    granted = _decide(state, spec)
    assert isinstance(granted, decisions.AllocationGranted) and granted.node in ("node-a", "node-b")
    second = _pods("e1_smoke.yaml")[0][0]
    third = _decide(state, compose(second, context=ComposeContext(model_capacity={"A100": A100}, review_uid="e1-b")))
    assert isinstance(third, decisions.AllocationGranted) and third.node != granted.node


def test_e2_gang_deployment_and_job() -> None:
    state = _inventory()
    (deploy_pod, deploy), (job_pod, job) = _pods("e2_gang.yaml")
    pool = PoolDefaults(name="default-pool")
    spec = compose(deploy_pod, pool_defaults=pool, context=ComposeContext(review_uid="e2-a",
                                                                           owner_replicas=workload_replicas(deploy)))
    assert (spec.request.milli_tflops, spec.request.vram_bytes, spec.limit.is_zero(), spec.qos) == (
        100_000, 10 * GI, True, "medium")
    assert {k: spec.attributes[k] for k in (keys.GANG_DESIRED, keys.GANG_REQUIRED, keys.GANG_GROUP_KEY,
                                            keys.GANG_TIMEOUT)} == {
        keys.GANG_DESIRED: "4", keys.GANG_REQUIRED: "4", keys.GANG_GROUP_KEY: "default/tf-deploy-gang-strict",
        keys.GANG_TIMEOUT: "5m"}
    assert spec.gang == GangSpec(key="default/tf-deploy-gang-strict", quorum=4, desired=4, timeout_s=300)
    waiting = _decide(state, spec)  # the allocator holds a gang member back until the quorum is present
    assert isinstance(waiting, decisions.AllocationQueued) and waiting.code == "gang"
    assert waiting.reason == "gang default/tf-deploy-gang-strict: 1 of 4 members present, quorum 4"
    job_spec = compose(job_pod, pool_defaults=pool, context=ComposeContext(review_uid="e2-b",
                                                                           owner_replicas=workload_replicas(job)))
    assert (job_spec.attributes[keys.GANG_DESIRED], job_spec.attributes[keys.GANG_REQUIRED]) == ("4", "2")
    assert job_spec.gang is not None and (job_spec.gang.quorum, job_spec.gang.desired) == (2, 4)
    assert isinstance(_decide(state, job_spec), decisions.AllocationQueued)


def test_e3_ascend_partitioned_is_composed_and_rejected_as_unschedulable() -> None:
    state = _inventory()
    (pod, _), = _pods("e3_ascend.yaml")
    spec = compose(pod, context=ComposeContext(review_uid="e3"))
    assert (spec.isolation, spec.partition_template, spec.vendor, spec.gpu_models, spec.qos) == (
        "partitioned", "vir01", "Ascend", ("Ascend 310P3",), "medium")
    assert (spec.request.compute_milli_percent, spec.limit.compute_milli_percent) == (10_000, 12_000)
    outcome = _decide(state, spec)  # gpuledger ships MIG templates only (no Ascend vNPU templates)
    assert isinstance(outcome, decisions.AllocationRejected) and outcome.code == "unschedulable"
    assert "model Ascend 310P3 has no MIG template table" in outcome.reason


def test_e4_profile_sample_is_high_qos_with_pod_cpu_memory() -> None:
    state = _inventory()
    (pod, _), = _pods("e4_profile.yaml")
    spec = compose(pod, context=ComposeContext(review_uid="e4"))
    assert (spec.workload, spec.namespace, spec.qos, spec.cpu_milli, spec.memory_bytes) == (
        "pytorch-test", "tensor-fusion", "high", 500, 2 * GI)
    assert spec.request == spec.limit == Resources(milli_tflops=10_000, vram_bytes=GI)
    outcome = _decide(state, spec)
    assert isinstance(outcome, decisions.AllocationGranted) and outcome.node == "node-e"
