"""Kubernetes source: Node objects with NVIDIA GPU Feature Discovery labels -> RegisterNode/RemoveNode.

``node_report`` is pure: a core/v1 Node JSON dict -> RegisterNode (or None for a node without
GPUs); a malformed GFD label raises :class:`NodeLabelError` naming the node, label and value.
``watch_nodes`` follows the Nodes with ``services.shared.kube.watch_objects`` (resume by
resourceVersion, re-list on 410) and publishes only what changed; the heartbeat loop re-sends.
Labels: ``nvidia.com/gpu.product`` (model), ``nvidia.com/gpu.count``, ``nvidia.com/gpu.memory``
(MiB per GPU), ``nvidia.com/mig.capable`` (optional: "true"/"false" -> isolation capabilities with
or without ``partitioned``; absent: unknown). GFD labels carry no NUMA node or NVLink group.
Cordoned (``spec.unschedulable``) or NotReady nodes are reported unschedulable.
"""

from __future__ import annotations

from typing import Any

import msgspec
import structlog
from kubernetes_asyncio import client

from events import bounds, quantity
from events.intents import RegisterNode, RemoveNode
from events.values import IsolationCapabilities
from services.discovery.catalog import ModelTable
from services.discovery.heartbeat import Inventory, Publish
from services.discovery.inventory import GpuReading, ReportConfig, build_gpus, finished, same_report
from services.shared import kube

log = structlog.get_logger(__name__)

PRODUCT_LABEL = "nvidia.com/gpu.product"
COUNT_LABEL = "nvidia.com/gpu.count"
MEMORY_LABEL = "nvidia.com/gpu.memory"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
MAX_GPUS_PER_NODE = 64
"""TensorFusion reads at most 64 devices per node (TensorFusion node discovery)."""


class NodeLabelError(ValueError):
    """A Node label or field cannot be read; names the node, the label and the value."""

    def __init__(self, node: str, label: str, value: object, problem: str) -> None:
        shown = bounds.echo(repr(value), 80)
        super().__init__(f"node {bounds.echo(node, 253)!r}: label {label}={shown}: {bounds.echo(problem, 512)}; "
                         "node skipped")
        self.node, self.label, self.value = node, label, value


def _int_label(node: str, labels: dict[str, str], label: str, *, low: int, high: int) -> int:
    raw = labels[label]
    text = str(raw).strip()
    try:
        if len(text) > 20:
            raise ValueError(text)
        value = int(text)
    except ValueError:
        raise NodeLabelError(node, label, raw, "not an integer") from None
    if not low <= value <= high:
        raise NodeLabelError(node, label, raw, f"must be between {low} and {high}")
    return value


def _capabilities(node: str, labels: dict[str, str]) -> IsolationCapabilities:
    """Isolation capabilities from GFD's ``nvidia.com/mig.capable`` (() when the label is absent)."""
    if MIG_CAPABLE_LABEL not in labels:
        return ()
    value = str(labels[MIG_CAPABLE_LABEL]).strip().lower()
    if value not in ("true", "false"):
        raise NodeLabelError(node, MIG_CAPABLE_LABEL, labels[MIG_CAPABLE_LABEL], "must be true or false")
    return ("shared", "soft", "hard", "partitioned") if value == "true" else ("shared", "soft", "hard")


def _allocatable(node: str, status: dict[str, Any]) -> tuple[int, int]:
    allocatable = status.get("allocatable") or {}
    try:
        cpu = quantity.to_milli(str(allocatable["cpu"])) if "cpu" in allocatable else 0
        memory = quantity.to_value(str(allocatable["memory"])) if "memory" in allocatable else 0
    except quantity.QuantityError as exc:
        raise NodeLabelError(node, "status.allocatable", allocatable, str(exc)) from None
    return cpu, memory


def is_schedulable(obj: dict[str, Any]) -> bool:
    """False when cordoned (``spec.unschedulable``) or the Ready condition is not True."""
    if (obj.get("spec") or {}).get("unschedulable"):
        return False
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def node_report(obj: dict[str, Any], *, table: ModelTable, config: ReportConfig) -> RegisterNode | None:
    """The RegisterNode for a Node dict, or None when it has no GPU labels (or count 0).

    Raises NodeLabelError for a non-integer or out-of-range count/memory, a missing product label
    on a node with a count, unparsable allocatable quantities, or a report beyond the contract's
    bounds (:mod:`events.bounds`: a 64-character label value, 300 labels, a too-long name).
    """
    meta = obj.get("metadata") or {}
    name, labels = str(meta.get("name", "")), dict(meta.get("labels") or {})
    if COUNT_LABEL not in labels:
        if PRODUCT_LABEL in labels:
            raise NodeLabelError(name, COUNT_LABEL, None, "missing while nvidia.com/gpu.product is set")
        return None
    count = _int_label(name, labels, COUNT_LABEL, low=0, high=MAX_GPUS_PER_NODE)
    if count == 0:
        return None
    product = str(labels.get(PRODUCT_LABEL, "")).strip()
    if not product:
        raise NodeLabelError(name, PRODUCT_LABEL, labels.get(PRODUCT_LABEL), "missing or empty")
    mib = _int_label(name, labels, MEMORY_LABEL, low=1, high=2**40) if MEMORY_LABEL in labels else 0
    cpu, memory = _allocatable(name, obj.get("status") or {})
    capabilities = _capabilities(name, labels)
    readings = [GpuReading(model=product, index=i, vram_bytes=mib * 2**20, isolation_capabilities=capabilities)
                for i in range(count)]
    intent = RegisterNode(
        intent_id="", node=name, pool=labels.get(config.pool_label) or config.pool,
        gpus=build_gpus(name, readings, table=table, config=config), labels=labels,
        cpu_milli=cpu, memory_bytes=memory, schedulable=is_schedulable(obj),
        heartbeat_ttl_s=config.heartbeat_ttl_s, source="kubernetes")
    try:
        return finished(intent)
    except bounds.BoundsError as exc:
        raise NodeLabelError(name, exc.field or "node", exc.value, str(exc)) from None


async def handle_event(event: kube.WatchEvent, *, inventory: Inventory, publish: Publish,
                       table: ModelTable, config: ReportConfig) -> None:
    """Apply one watch event to ``inventory`` and publish what the allocator must learn.

    DELETED -> RemoveNode. A known node that lost its GPU labels is re-registered with no GPUs
    (its GPUs go Unknown, live allocations are kept: a GFD restart must not release pods).
    A node with malformed labels is logged (node, label, value) and skipped; others continue.
    """
    if event.type == kube.SYNCED:
        return
    meta = event.object.get("metadata") or {}
    name = str(meta.get("name", ""))
    previous = inventory.get(name)
    if event.type == "DELETED":
        if previous is not None:
            inventory.remove(name)
            await publish(RemoveNode(intent_id=f"remove:{name}:{meta.get('resourceVersion', '')}",
                                     node=name, pool=previous.pool))
        return
    try:
        report = node_report(event.object, table=table, config=config)
    except NodeLabelError as exc:
        log.error("bad node labels", node=exc.node, label=exc.label, value=exc.value, error=str(exc))
        return
    if report is None:
        if previous is None or not previous.gpus:
            return
        report = finished(msgspec.structs.replace(previous, gpus=(), intent_id=""))
    inventory.put(report)
    if previous is None or not same_report(previous, report):
        await publish(report)


async def watch_nodes(api: Any, *, inventory: Inventory, publish: Publish, table: ModelTable,
                      config: ReportConfig, label_selector: str = "", timeout_s: int = 300) -> None:
    """Follow Nodes forever (``api``: a kubernetes-asyncio ApiClient), publishing as in handle_event."""
    core = client.CoreV1Api(api)

    async def list_nodes(**kwargs: Any) -> Any:
        if label_selector:
            kwargs["label_selector"] = label_selector
        return await core.list_node(**kwargs)

    async for event in kube.watch_objects(list_nodes, timeout_s=timeout_s):
        await handle_event(event, inventory=inventory, publish=publish, table=table, config=config)


async def report_nodes(api: Any, *, inventory: Inventory, publish: Publish, table: ModelTable,
                       config: ReportConfig, label_selector: str = "") -> None:
    """List Nodes once and publish a report per GPU node (``gpuledger discovery --once``)."""
    core = client.CoreV1Api(api)
    listing = await (core.list_node(label_selector=label_selector) if label_selector else core.list_node())
    for node in listing.items:
        event = kube.WatchEvent(type="ADDED", object=api.sanitize_for_serialization(node))
        await handle_event(event, inventory=inventory, publish=publish, table=table, config=config)
