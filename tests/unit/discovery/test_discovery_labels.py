"""Kubernetes Node + GFD labels -> RegisterNode, and watch events -> published intents (no network)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from events import decisions as ev
from events.base import Intent
from events.intents import RegisterNode, RemoveNode, RequestAllocation
from events.values import AllocationSpec, Resources
from services.allocator import domain
from services.discovery import kubernetes as k8s
from services.discovery.catalog import ModelTable
from services.discovery.heartbeat import Inventory
from services.discovery.inventory import ReportConfig
from services.shared.kube import SYNCED, WatchEvent
from tests.fixtures.kube_api import build_node

TABLE = ModelTable.load()
CONFIG = ReportConfig(pool="default", pool_label="gpuledger.io/pool", default_milli_tflops=7_000,
                      default_vram_bytes=2**30, heartbeat_ttl_s=90.0)
GFD = {k8s.PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB", k8s.COUNT_LABEL: "8", k8s.MEMORY_LABEL: "81920"}


def gpu_node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return build_node(name, labels={**GFD, **(labels or {})}, cpu="96", memory="384Gi")


def report(obj: dict[str, Any]) -> RegisterNode | None:
    return k8s.node_report(obj, table=TABLE, config=CONFIG)


def test_gfd_labels_become_gpus_with_table_tflops_and_label_memory() -> None:
    intent = report(gpu_node("node-a"))
    assert intent is not None
    assert [g.name for g in intent.gpus] == [f"node-a-gpu-{i}" for i in range(8)]
    assert {(g.model, g.vendor, g.capacity) for g in intent.gpus} == {
        ("A100_SXM_80G", "NVIDIA", Resources(milli_tflops=312_000, vram_bytes=81920 * 2**20))}
    assert (intent.cpu_milli, intent.memory_bytes) == (96_000, 384 * 2**30)
    assert (intent.pool, intent.schedulable, intent.heartbeat_ttl_s, intent.source) == (
        "default", True, 90.0, "kubernetes")
    assert intent.labels[k8s.COUNT_LABEL] == "8" and intent.intent_id.startswith("register:node-a:")


def test_pool_comes_from_the_pool_label() -> None:
    obj = build_node("n", labels={**GFD, "gpuledger.io/pool": "training"})
    assert (report(obj) or pytest.fail()).pool == "training"


@pytest.mark.parametrize(("spec", "ready"), [({"unschedulable": True}, True), ({}, False)])
def test_cordoned_or_not_ready_nodes_are_unschedulable(spec: dict[str, Any], ready: bool) -> None:
    obj = build_node("n", labels=GFD, ready=ready)
    obj["spec"] = spec
    assert (report(obj) or pytest.fail()).schedulable is False


def test_node_without_ready_condition_is_unschedulable() -> None:
    obj = build_node("n", labels=GFD)
    obj["status"]["conditions"] = []
    assert (report(obj) or pytest.fail()).schedulable is False


def test_missing_memory_label_uses_the_table_vram_and_shared_suffix_is_ignored() -> None:
    obj = build_node("n", labels={k8s.PRODUCT_LABEL: "Tesla-T4-SHARED", k8s.COUNT_LABEL: "2"})
    intent = report(obj) or pytest.fail()
    assert [(g.model, g.capacity.vram_bytes) for g in intent.gpus] == [("T4", 16 * 2**30)] * 2


def test_unknown_model_registers_with_the_default_capacity() -> None:
    obj = build_node("n", labels={k8s.PRODUCT_LABEL: "ACME-Tensor-9000", k8s.COUNT_LABEL: "1",
                                  k8s.MEMORY_LABEL: "1024"})
    gpu = (report(obj) or pytest.fail()).gpus[0]
    assert (gpu.model, gpu.capacity) == ("ACME-Tensor-9000", Resources(milli_tflops=7_000, vram_bytes=2**30))


@pytest.mark.parametrize("labels", [{}, {k8s.COUNT_LABEL: "0", k8s.PRODUCT_LABEL: "NVIDIA-L4"}, {"zone": "a"}])
def test_nodes_without_gpus_are_not_reported(labels: dict[str, str]) -> None:
    assert report(build_node("cpu-only", labels=labels)) is None


@pytest.mark.parametrize(("labels", "label"), [
    ({**GFD, k8s.COUNT_LABEL: "eight"}, k8s.COUNT_LABEL),
    ({**GFD, k8s.COUNT_LABEL: "-1"}, k8s.COUNT_LABEL),
    ({**GFD, k8s.COUNT_LABEL: "65"}, k8s.COUNT_LABEL),
    ({**GFD, k8s.MEMORY_LABEL: "80Gi"}, k8s.MEMORY_LABEL),
    ({**GFD, k8s.MEMORY_LABEL: "0"}, k8s.MEMORY_LABEL),
    ({k8s.COUNT_LABEL: "2"}, k8s.PRODUCT_LABEL),
    ({k8s.PRODUCT_LABEL: "NVIDIA-L4"}, k8s.COUNT_LABEL),
])
def test_malformed_labels_name_the_node_and_the_label(labels: dict[str, str], label: str) -> None:
    with pytest.raises(k8s.NodeLabelError) as error:
        report(build_node("bad-node", labels=labels))
    assert error.value.label == label and "bad-node" in str(error.value) and label in str(error.value)


def test_bad_allocatable_quantity_is_a_node_error() -> None:
    obj = build_node("n", labels=GFD, cpu="ninety")
    with pytest.raises(k8s.NodeLabelError, match="allocatable"):
        report(obj)


class Sink:
    """Collects published intents."""

    def __init__(self) -> None:
        self.intents: list[Intent] = []

    async def __call__(self, intent: Intent) -> None:
        self.intents.append(intent)


async def feed(events: list[tuple[str, dict[str, Any]]]) -> tuple[Sink, Inventory]:
    sink, inventory = Sink(), Inventory()
    for kind, obj in events:
        await k8s.handle_event(WatchEvent(type=kind, object=obj), inventory=inventory, publish=sink,
                               table=TABLE, config=CONFIG)
    return sink, inventory


async def test_malformed_node_is_skipped_and_the_others_continue() -> None:
    bad = build_node("bad", labels={**GFD, k8s.COUNT_LABEL: "x"})
    sink, inventory = await feed([("ADDED", bad), ("ADDED", gpu_node("good")), ("ADDED", build_node("cpu"))])
    assert [(type(i).__name__, getattr(i, "node", "")) for i in sink.intents] == [("RegisterNode", "good")]
    assert [r.node for r in inventory.reports()] == ["good"]


async def test_unchanged_modification_is_not_republished_but_a_cordon_is() -> None:
    node = gpu_node("a")
    cordoned = build_node("a", labels=node["metadata"]["labels"], cpu="96", memory="384Gi", unschedulable=True)
    sink, _ = await feed([("ADDED", node), ("MODIFIED", node), (SYNCED, {}), ("MODIFIED", cordoned)])
    assert [i.schedulable for i in sink.intents if isinstance(i, RegisterNode)] == [True, False]


async def test_label_removal_keeps_the_node_with_no_gpus_and_delete_removes_it() -> None:
    node = gpu_node("a")
    sink, inventory = await feed([("ADDED", node), ("MODIFIED", build_node("a")), ("DELETED", build_node("a"))])
    first, emptied, removed = sink.intents
    assert isinstance(first, RegisterNode) and len(first.gpus) == 8
    assert isinstance(emptied, RegisterNode) and emptied.gpus == ()
    assert isinstance(removed, RemoveNode) and removed.node == "a" and inventory.reports() == []


async def test_node_shrinking_under_live_allocations_keeps_them_and_flags_missing_gpus() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    sink, _ = await feed([("ADDED", gpu_node("a")), ("MODIFIED", gpu_node("a", {k8s.COUNT_LABEL: "4"}))])
    big, small = sink.intents
    assert isinstance(big, RegisterNode) and isinstance(small, RegisterNode) and len(small.gpus) == 4
    state = domain.ClusterState.empty()
    domain.process(state, big, now)
    spec = AllocationSpec(allocation_id="pod-1", namespace="ns", pod="p", pool="default", gpu_count=8,
                          request=Resources(milli_tflops=10_000, vram_bytes=2**30),
                          limit=Resources(milli_tflops=10_000, vram_bytes=2**30))
    granted = domain.process(state, RequestAllocation(intent_id="r1", spec=spec), now)
    assert any(isinstance(e, ev.AllocationGranted) for e in granted)
    events = domain.process(state, small, now)
    missing = {e.gpu for e in events if isinstance(e, ev.GpuPhaseChanged) and e.phase == "Unknown"}
    assert missing == {f"a-gpu-{i}" for i in range(4, 8)}
    assert state.allocations["pod-1"].status == "granted" and len(state.allocations["pod-1"].gpus) == 8
    for gpu in state.gpus.values():
        assert 0 <= gpu.used_milli_tflops <= gpu.spec.capacity.milli_tflops
