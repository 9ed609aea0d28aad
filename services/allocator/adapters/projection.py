"""Read-model projection: events -> rows of ``allocations``, state -> rows of ``gpus``/``quota_usage``.

Pure functions shared by the PostgreSQL store, its in-memory twin and ``replay --verify`` (which
rebuilds the rows from position 0 and compares). Rows are dicts keyed by the column names of
:mod:`services.allocator.adapters.tables`; TFLOPS in milli-TFLOPS, VRAM in bytes, times UTC.

An allocation's *life* starts at the event that first names it (queued, granted or rejected,
row ``id`` = that position) and ends when it is released or preempted (status ``preempted``,
``preempted_by`` the preemptor's allocation id), or at once when rejected; a pod
whose allocation id comes back after a release starts a new life (a new row).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import msgspec

from events.decisions import (
    AllocationGranted,
    AllocationPreempted,
    AllocationQueued,
    AllocationRejected,
    AllocationReleased,
    AllocationResized,
    GpuCapacityChanged,
    GpuPhaseChanged,
    MoveCancelled,
    MoveReserved,
    NodePhaseChanged,
    NodeRegistered,
    NodeRemoved,
    QuotaRemoved,
    QuotaSet,
)
from events.values import AllocationSpec, Resources
from services.allocator.domain.model import GpuState
from services.allocator.domain.state import ClusterState
from services.allocator.ports import StoredEvent

Row = dict[str, Any]
REASON_COLUMNS = ("reason", "code", "quota_dimension")
"""Columns of an ``allocations`` row that say why it waits: the CURRENT reason while it is queued
(kept up to date by the allocator outside the log), the queueing or rejection reason otherwise."""


class AllocationChanges(msgspec.Struct, kw_only=True):
    """What a batch does to ``allocations``: ``patches`` (by allocation id) update the open row
    of a life that started before the batch (apply them first; ``resize_delta`` adds to
    ``resize_count``), ``inserts`` are whole rows of lives that started in the batch."""

    inserts: list[Row] = []
    patches: dict[str, Row] = {}


class Touched(msgspec.Struct, kw_only=True):
    """What a batch may have changed in ``gpus``/``quota_usage``: whole ``nodes`` (rewrite every GPU
    row of the node), single ``gpus`` (by name), and ``namespaces``."""

    nodes: set[str] = set()
    gpus: set[str] = set()
    namespaces: set[str] = set()


def utc(moment: datetime) -> datetime:
    """``moment`` as an aware UTC datetime (naive values are taken to be UTC)."""
    zone = moment.tzinfo
    if zone is UTC:
        return moment
    return moment.replace(tzinfo=UTC) if zone is None else moment.astimezone(UTC)


def _life_row(spec: AllocationSpec, *, position: int, at: datetime, status: str) -> Row:
    return {
        "id": position, "allocation_id": spec.allocation_id, "namespace": spec.namespace, "pod": spec.pod,
        "workload": spec.workload, "pool": spec.pool, "qos": spec.qos, "gpu_count": spec.gpu_count,
        **_request_limit(spec.request, spec.limit), "status": status, "node": None, "gpus": [],
        "requested_at": utc(at), "queued_at": None, "granted_at": None, "resized_at": None,
        "released_at": None, "resize_count": 0, "from_queue": False, "reason": "", "code": "",
        "quota_dimension": "", "release_reason": "", "last_position": position, "preempted_by": None,
    }


def _request_limit(request: Resources, limit: Resources) -> Row:
    return {
        "request_milli_tflops": request.milli_tflops, "request_vram_bytes": request.vram_bytes,
        "request_compute_milli_percent": request.compute_milli_percent,
        "limit_milli_tflops": limit.milli_tflops, "limit_vram_bytes": limit.vram_bytes,
    }


class _Folder:
    """Folds one batch of stored events into :class:`AllocationChanges`."""

    def __init__(self) -> None:
        self.changes = AllocationChanges()
        self.open_new: dict[str, Row] = {}
        self.closed_old: set[str] = set()

    def target(self, allocation_id: str) -> Row | None:
        if allocation_id in self.open_new:
            return self.open_new[allocation_id]
        if allocation_id in self.closed_old:
            return None
        return self.changes.patches.setdefault(allocation_id, {"resize_delta": 0})

    def start(self, row: Row) -> None:
        self.changes.inserts.append(row)
        if row["status"] in ("queued", "granted"):
            self.open_new[row["allocation_id"]] = row

    def apply(self, stored: StoredEvent) -> None:
        event, position = stored.event, stored.position
        if isinstance(event, AllocationQueued):
            row = _life_row(event.spec, position=position, at=event.at, status="queued")
            row.update(queued_at=utc(event.at), reason=event.reason, code=event.code,
                       quota_dimension=event.quota_dimension)
            self.start(row)
        elif isinstance(event, AllocationRejected):
            row = _life_row(event.spec, position=position, at=event.at, status="rejected")
            row.update(reason=event.reason, code=event.code, quota_dimension=event.quota_dimension)
            self.start(row)
        elif isinstance(event, AllocationGranted):
            self.granted(event, position)
        elif isinstance(event, AllocationReleased):
            self.released(event, position)
        elif isinstance(event, AllocationPreempted):
            self.preempted(event, position)
        elif isinstance(event, AllocationResized):
            self.resized(event, position)

    def granted(self, event: AllocationGranted, position: int) -> None:
        fields: Row = {"status": "granted", "node": event.node, "gpus": list(event.gpus),
                       "granted_at": utc(event.at), "last_position": position}
        if event.from_queue and (row := self.target(event.spec.allocation_id)) is not None:
            row.update(fields, from_queue=True)
            _leave_queue(row)
            return
        row = _life_row(event.spec, position=position, at=event.at, status="granted")
        row.update(fields)
        self.start(row)

    def released(self, event: AllocationReleased, position: int) -> None:
        row = self.target(event.allocation_id)
        if row is None:
            return
        row.update(status="released", released_at=utc(event.at), release_reason=event.reason,
                   last_position=position)
        if event.was_queued:
            _leave_queue(row)
        if self.open_new.pop(event.allocation_id, None) is None:
            self.closed_old.add(event.allocation_id)

    def preempted(self, event: AllocationPreempted, position: int) -> None:
        """The victim's life closes with status ``preempted`` and the preemptor's allocation id."""
        row = self.target(event.allocation_id)
        if row is None:
            return
        row.update(status="preempted", released_at=utc(event.at), release_reason=event.reason,
                   preempted_by=event.preemptor, last_position=position)
        if self.open_new.pop(event.allocation_id, None) is None:
            self.closed_old.add(event.allocation_id)

    def resized(self, event: AllocationResized, position: int) -> None:
        row = self.target(event.allocation_id)
        if row is None:
            return
        row.update(_request_limit(event.request, event.limit), resized_at=utc(event.at),
                   last_position=position)
        key = "resize_delta" if "resize_delta" in row else "resize_count"
        row[key] += 1


def _leave_queue(row: Row) -> None:
    """A life leaves the queue: a patch restores the REASON_COLUMNS of its AllocationQueued event."""
    if "resize_delta" in row:  # a patch of an older life (a row started in this batch is untouched)
        row["restore_reason"] = True


def allocation_changes(batch: Iterable[StoredEvent]) -> AllocationChanges:
    """The ``allocations`` changes of ``batch`` (in position order)."""
    folder = _Folder()
    for stored in batch:
        folder.apply(stored)
    return folder.changes


def touched(batch: Iterable[StoredEvent], state: ClusterState) -> Touched:
    """Nodes, GPUs and namespaces whose ``gpus``/``quota_usage`` rows ``batch`` may have changed.

    ``state`` is the projection after the batch (it locates the GPUs of a resized allocation).
    GPUs of a touched node are left out of ``gpus`` (the node's rows are rewritten anyway).
    """
    result = Touched(nodes=set(), gpus=set(), namespaces=set())
    for stored in batch:
        event = stored.event
        if isinstance(event, AllocationGranted):
            result.gpus.update(event.gpus)
            result.namespaces.add(event.spec.namespace)
        elif isinstance(event, AllocationReleased | AllocationPreempted):
            result.gpus.update(event.gpus)
            result.namespaces.add(event.namespace)
        elif isinstance(event, AllocationResized):
            result.namespaces.add(event.namespace)
            live = state.allocations.get(event.allocation_id)
            if live is not None:
                result.gpus.update(live.gpus)
        elif isinstance(event, GpuCapacityChanged | GpuPhaseChanged):
            result.gpus.add(event.gpu)
        elif isinstance(event, NodeRegistered | NodeRemoved | NodePhaseChanged):
            result.nodes.add(event.node)
        elif isinstance(event, QuotaSet | QuotaRemoved):
            result.namespaces.add(event.namespace)
        elif isinstance(event, MoveReserved):  # a defrag reservation's hold is in its target GPUs' used figures
            result.gpus.update(event.target_gpus)
        elif isinstance(event, MoveCancelled):  # its hold freed (the event names the target node only)
            result.nodes.add(event.node)
    if result.nodes:
        result.gpus = {g for g in result.gpus if g not in state.gpus or state.gpus[g].node not in result.nodes}
    return result


def gpu_row(gpu: GpuState) -> Row:
    """The ``gpus`` row of one GPU (capacity, used and available in milli-TFLOPS and bytes)."""
    spec, used_tflops, used_vram = gpu.spec, gpu.used_milli_tflops, gpu.used_vram_bytes
    capacity = spec.capacity
    return {
        "name": spec.name, "node": gpu.node, "pool": gpu.pool, "model": spec.model, "phase": gpu.phase,
        "capacity_milli_tflops": capacity.milli_tflops, "capacity_vram_bytes": capacity.vram_bytes,
        "used_milli_tflops": used_tflops, "used_vram_bytes": used_vram,
        "available_milli_tflops": max(0, capacity.milli_tflops - used_tflops),
        "available_vram_bytes": max(0, capacity.vram_bytes - used_vram), "allocations": len(gpu.charges),
    }


def gpu_rows(state: ClusterState, nodes: Iterable[str] | None = None) -> list[Row]:
    """``gpus`` rows of every GPU of ``nodes`` (all GPUs when None), sorted by name."""
    wanted = None if nodes is None else set(nodes)
    return sorted((gpu_row(g) for g in state.gpus.values() if wanted is None or g.node in wanted),
                  key=lambda r: str(r["name"]))


def gpu_rows_named(state: ClusterState, names: Iterable[str]) -> tuple[list[Row], list[str]]:
    """(rows of the GPUs in ``names`` that exist, the names that no longer exist), sorted by name."""
    rows, gone = [], []
    for name in sorted(names):
        gpu = state.gpus.get(name)
        if gpu is None:
            gone.append(name)
        else:
            rows.append(gpu_row(gpu))
    return rows, gone


def quota_rows(state: ClusterState, namespaces: Iterable[str] | None = None) -> list[Row]:
    """``quota_usage`` rows of ``namespaces`` (all known when None) that have usage or a quota."""
    known = set(state.usage) | set(state.quotas)
    wanted = known if namespaces is None else known & set(namespaces)
    rows = []
    for namespace in sorted(wanted):
        usage = state.usage.get(namespace)
        quota = state.quotas.get(namespace)
        total = quota.total_requests if quota is not None else None
        rows.append({
            "namespace": namespace,
            "requests_milli_tflops": usage.requests_milli_tflops if usage else 0,
            "requests_vram_bytes": usage.requests_vram_bytes if usage else 0,
            "limits_milli_tflops": usage.limits_milli_tflops if usage else 0,
            "limits_vram_bytes": usage.limits_vram_bytes if usage else 0,
            "workers": usage.workers if usage else 0,
            "quota_requests_milli_tflops": total.milli_tflops if total else None,
            "quota_requests_vram_bytes": total.vram_bytes if total else None,
        })
    return rows


class ReadModels(msgspec.Struct, kw_only=True):
    """All read-model rows, each list sorted by its key (``replay --verify`` compares them)."""

    gpus: list[Row]
    allocations: list[Row]
    quota_usage: list[Row]
