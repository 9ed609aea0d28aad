"""The ``allocations`` read model held in memory: the twin's table and ``replay --verify``'s rebuild.

Applies :class:`~services.allocator.adapters.projection.AllocationChanges` exactly as the
PostgreSQL patch and insert statements do (``services.allocator.adapters.pg_projection``),
including the current reasons of queued rows written outside the log (:meth:`set_reasons`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from services.allocator.adapters.projection import REASON_COLUMNS, AllocationChanges, Row, allocation_changes
from services.allocator.ports import StoredEvent


class AllocationTable:
    """The ``allocations`` rows held in memory (the twin's table and ``replay --verify``'s rebuild)."""

    def __init__(self) -> None:
        self.rows: dict[int, Row] = {}
        self.open: dict[str, int] = {}
        self.queued_reasons: dict[int, tuple[str, str, str]] = {}  # row id -> its AllocationQueued's

    def apply(self, changes: AllocationChanges) -> None:
        """Apply patches to open rows, then insert the new lives (the order PostgreSQL uses)."""
        for allocation_id, patch in changes.patches.items():
            row_id = self.open.get(allocation_id)
            if row_id is None:
                continue
            row = self.rows[row_id]
            delta = patch.get("resize_delta", 0)
            row.update({k: v for k, v in patch.items() if k not in ("resize_delta", "restore_reason")})
            row["resize_count"] += delta
            original = self.queued_reasons.pop(row_id, None) if row["status"] != "queued" else None
            if patch.get("restore_reason") and original is not None:
                row.update(zip(REASON_COLUMNS, original, strict=True))
            if row["status"] not in ("queued", "granted"):
                del self.open[allocation_id]
        for new in changes.inserts:
            self.rows[new["id"]] = dict(new)
            if new["status"] in ("queued", "granted"):
                self.open[new["allocation_id"]] = new["id"]
            if new["status"] == "queued":
                self.queued_reasons[new["id"]] = tuple(new[c] for c in REASON_COLUMNS)  # type: ignore[assignment]

    def set_reasons(self, reasons: Mapping[str, tuple[str, str, str]], *, position: int | None = None) -> int:
        """Set ``(reason, code, quota_dimension)`` of the open queued rows of these allocation ids
        (the current reasons, written outside the log); with ``position`` (the log position they were
        computed at) a row changed after it is left alone, as on PostgreSQL. Returns the rows changed."""
        rows = [self.rows[i] for a in reasons if (i := self.open.get(a)) is not None]
        queued = [row for row in rows if row["status"] == "queued"
                  and (position is None or row["last_position"] <= position)]
        for row in queued:
            row.update(zip(REASON_COLUMNS, reasons[row["allocation_id"]], strict=True))
        return len(queued)

    def newest_of_pod(self, namespace: str, pod: str) -> str:
        """The allocation id of the newest life (highest ``id``) of pod ``namespace/pod``, or ""."""
        found = [row for row in self.rows.values() if row["namespace"] == namespace and row["pod"] == pod]
        return str(max(found, key=lambda row: row["id"])["allocation_id"]) if found else ""

    def sorted_rows(self) -> list[Row]:
        """Every row, by ``id``."""
        return [self.rows[k] for k in sorted(self.rows)]


def project_all(events: Sequence[StoredEvent]) -> AllocationTable:
    """The ``allocations`` table that folding ``events`` from an empty table gives."""
    table = AllocationTable()
    table.apply(allocation_changes(events))
    return table
