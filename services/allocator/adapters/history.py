"""History queries over the read models (``gpuledger history``); docs/sql.md has the SQL for more.

Owns the allocation-history filter (namespace, pod, node, status, since, at) and the JSON shape of a
history row: quantities as canonical Kubernetes strings, times as ISO-8601 UTC.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg
import msgspec

from events.quantity import format_bytes, format_milli, format_percent_milli
from services.allocator.adapters.projection import Row


class HistoryFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which allocation lives to list. ``since``: requested at or after; ``at``: granted and not
    yet released at that moment (with ``node``: what ran on node N at time T); ``limit`` newest first."""

    namespace: str | None = None
    pod: str | None = None
    node: str | None = None
    status: str | None = None
    since: datetime | None = None
    at: datetime | None = None
    limit: int = 50


def allocations_sql(flt: HistoryFilter) -> tuple[str, list[Any]]:
    """The SELECT for ``flt`` with its asyncpg parameters (newest lives first)."""
    where: list[str] = []
    args: list[Any] = []
    for column, value in (("namespace", flt.namespace), ("pod", flt.pod), ("node", flt.node), ("status", flt.status)):
        if value is not None:
            args.append(value)
            where.append(f"{column} = ${len(args)}")
    if flt.since is not None:
        args.append(flt.since)
        where.append(f"requested_at >= ${len(args)}")
    if flt.at is not None:
        args.append(flt.at)
        where.append(f"granted_at <= ${len(args)} AND (released_at IS NULL OR released_at > ${len(args)})")
    args.append(flt.limit)
    clause = f"WHERE {' AND '.join(where)} " if where else ""
    return f"SELECT * FROM allocations {clause}ORDER BY requested_at DESC, id DESC LIMIT ${len(args)}", args


async def allocations(pool: asyncpg.Pool, flt: HistoryFilter) -> list[Row]:
    """Allocation rows matching ``flt`` (dicts keyed by column name)."""
    sql, args = allocations_sql(flt)
    return [dict(r) for r in await pool.fetch(sql, *args)]


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _request(row: Row) -> dict[str, str]:
    """The per-GPU request; a compute share (``compute_percent``, e.g. ``"50"``) when it is one."""
    request = {"tflops": format_milli(row["request_milli_tflops"]), "vram": format_bytes(row["request_vram_bytes"])}
    if row.get("request_compute_milli_percent"):
        request["compute_percent"] = format_percent_milli(row["request_compute_milli_percent"])
    return request


def to_json(row: Row) -> dict[str, Any]:
    """A history row in the CLI's JSON shape (quantities as Kubernetes strings, e.g. ``"100"``, ``"10Gi"``)."""
    return {
        "allocation_id": row["allocation_id"], "namespace": row["namespace"], "pod": row["pod"],
        "workload": row["workload"], "pool": row["pool"], "status": row["status"], "qos": row["qos"],
        "node": row["node"] or "", "gpus": list(row["gpus"]), "gpu_count": row["gpu_count"],
        "request": _request(row),
        "limit": {"tflops": format_milli(row["limit_milli_tflops"]), "vram": format_bytes(row["limit_vram_bytes"])},
        "requested_at": _iso(row["requested_at"]), "queued_at": _iso(row["queued_at"]),
        "granted_at": _iso(row["granted_at"]), "resized_at": _iso(row["resized_at"]),
        "released_at": _iso(row["released_at"]), "resize_count": row["resize_count"],
        "reason": row["reason"], "code": row["code"], "release_reason": row["release_reason"],
        "preempted_by": row.get("preempted_by"),
    }
