"""Read-model writes of the PostgreSQL append: ``allocations``, ``gpus`` and ``quota_usage``.

Owns the SQL that applies one batch's projection (:mod:`services.allocator.adapters.projection`)
inside the append transaction of :class:`~services.allocator.adapters.postgres.PostgresEventStore`.
:func:`prepare` builds everything without I/O (the append runs it while PostgreSQL writes the log);
:func:`write` sends a fixed number of statements whatever the batch size:

- ``allocations``: one UPDATE for the open lives the batch changes (patches), one INSERT for the
  lives it starts, both from a JSON row set (``json_to_recordset``/``json_populate_recordset``:
  one ``msgspec`` encode on our side instead of asyncpg encoding every array element);
- ``gpus``: whole nodes rewritten (DELETE + COPY) on node events; single GPUs updated in place from
  a JSON row set (only the columns a grant, release, resize, capacity or phase change can alter, so
  the update is HOT on the table's half-empty pages), inserted when missing;
- ``quota_usage``: the touched namespaces rewritten (DELETE + COPY).

The UPDATEs join a few hundred rows to a table by its key. ``allocations`` grows by hundreds of rows
per append, so its statistics are usually stale, and a plain join on the open lives let the planner
hash them all (9 ms instead of 1 ms for 256 patches) or loop over them (290 ms). The patch therefore
finds each open life with a ``LATERAL ... LIMIT 1`` index lookup, and :data:`PLAN_SETTINGS` turns
hash and merge joins off for the append transaction only (the ``gpus`` update then uses its primary
key). ``tests/integration/log/test_append_plans.py`` checks both plans.
"""

from __future__ import annotations

import asyncpg
import msgspec

from services.allocator.adapters import projection
from services.allocator.adapters.projection import REASON_COLUMNS
from services.allocator.adapters.tables import GPU_COLUMNS, QUOTA_COLUMNS
from services.allocator.domain.state import ClusterState
from services.allocator.ports import StoredEvent

PLAN_SETTINGS = "SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off"
"""Transaction-scoped planner settings of the append (keyed lookups only; see the module docstring)."""

_PATCH_TYPES = {
    "status": "text", "node": "text", "gpus": "text[]", "granted_at": "timestamptz", "released_at": "timestamptz",
    "release_reason": "text", "resized_at": "timestamptz", "from_queue": "boolean", "request_milli_tflops": "bigint",
    "request_vram_bytes": "bigint", "request_compute_milli_percent": "bigint", "limit_milli_tflops": "bigint",
    "limit_vram_bytes": "bigint", "last_position": "bigint", "resize_delta": "int", "restore_reason": "boolean",
    "preempted_by": "text",
}
_RESTORE = "CASE WHEN u.restore_reason THEN coalesce((SELECT e.data ->> '{c}' FROM events e WHERE e.position = a.id), "
PATCH_ALLOCATIONS = (
    "UPDATE allocations a SET "
    + ", ".join(f"{c} = coalesce(u.{c}, a.{c})" for c in _PATCH_TYPES if c not in ("resize_delta", "restore_reason"))
    + ", resize_count = a.resize_count + coalesce(u.resize_delta, 0), "
    + ", ".join(f"{c} = {_RESTORE.format(c=c)}'') ELSE a.{c} END" for c in REASON_COLUMNS)
    + " FROM json_to_recordset($1::json) AS u(allocation_id text, "
    + ", ".join(f"{c} {t}" for c, t in _PATCH_TYPES.items()) + ")"
    + " CROSS JOIN LATERAL (SELECT o.id FROM allocations o WHERE o.allocation_id = u.allocation_id"
    + " AND o.status IN ('queued', 'granted') LIMIT 1) AS o WHERE a.id = o.id"
)
_INSERT_ALLOCATIONS = "INSERT INTO allocations SELECT * FROM json_populate_recordset(NULL::allocations, $1::json)"
_GPU_TYPES = dict(zip(GPU_COLUMNS, ("text", "text", "text", "text", "text", "bigint", "bigint", "bigint", "bigint",
                                    "bigint", "bigint", "int"), strict=True))
GPU_MUTABLE = ("phase", "capacity_milli_tflops", "capacity_vram_bytes", "used_milli_tflops", "used_vram_bytes",
               "available_milli_tflops", "available_vram_bytes", "allocations")
"""``gpus`` columns an event about one GPU can change (node, pool and model change only with its node)."""
UPDATE_GPUS = (
    "UPDATE gpus g SET " + ", ".join(f"{c} = u.{c}" for c in GPU_MUTABLE) + " FROM json_to_recordset($1::json) AS u("
    + ", ".join(f"{c} {_GPU_TYPES[c]}" for c in ("name", *GPU_MUTABLE)) + ") WHERE g.name = u.name"
)
_UPSERT_GPUS = (
    f"INSERT INTO gpus ({', '.join(GPU_COLUMNS)}) SELECT * FROM unnest("
    + ", ".join(f"${i + 1}::{t}[]" for i, t in enumerate(_GPU_TYPES.values()))
    + ") ON CONFLICT (name) DO UPDATE SET "
    + ", ".join(f"{c} = EXCLUDED.{c}" for c in GPU_COLUMNS[1:])
)


class Prepared(msgspec.Struct, kw_only=True):
    """One batch's read-model changes, ready to send: JSON row sets (``json_to_recordset``) and rows
    for COPY. Built by :func:`prepare` without I/O, so it can be computed while the log is written."""

    patches: str | None = None
    inserts: str | None = None
    nodes: list[str] = []
    node_rows: list[projection.Row] = []
    gone: list[str] = []
    gpu_rows: list[projection.Row] = []
    gpu_json: str | None = None
    namespaces: list[str] = []
    quota_rows: list[projection.Row] = []


def prepare(stored: list[StoredEvent], state: ClusterState) -> Prepared:
    """The read-model changes of ``stored`` (the batch's events, positions assigned); ``state`` is the
    projection after the batch and must not change until this returns."""
    changes = projection.allocation_changes(stored)
    touched = projection.touched(stored, state)
    gpu_rows, gone = projection.gpu_rows_named(state, touched.gpus)
    namespaces = sorted(touched.namespaces)
    nodes = sorted(touched.nodes)
    return Prepared(
        patches=_json([{"allocation_id": k, **p} for k, p in changes.patches.items()]) if changes.patches else None,
        inserts=_json(changes.inserts) if changes.inserts else None,
        nodes=nodes, node_rows=projection.gpu_rows(state, nodes) if nodes else [], gone=gone,
        gpu_rows=gpu_rows, gpu_json=_json(gpu_rows) if gpu_rows else None,
        namespaces=namespaces, quota_rows=projection.quota_rows(state, namespaces) if namespaces else [])


async def write(conn: asyncpg.Connection, prepared: Prepared) -> None:
    """Send ``prepared`` on ``conn``, inside its open transaction (a fixed number of statements)."""
    if prepared.patches is not None:
        await conn.execute(PATCH_ALLOCATIONS, prepared.patches)
    if prepared.inserts is not None:
        await conn.execute(_INSERT_ALLOCATIONS, prepared.inserts)
    if prepared.nodes:
        await conn.execute("DELETE FROM gpus WHERE node = any($1::text[]) OR name = any($2::text[])",
                           prepared.nodes, [r["name"] for r in prepared.node_rows])
        await _copy(conn, "gpus", GPU_COLUMNS, prepared.node_rows)
    if prepared.gone:
        await conn.execute("DELETE FROM gpus WHERE name = any($1::text[])", prepared.gone)
    if prepared.gpu_json is not None:
        await _update_gpus(conn, prepared.gpu_json, prepared.gpu_rows)
    if prepared.namespaces:
        await conn.execute("DELETE FROM quota_usage WHERE namespace = any($1::text[])", prepared.namespaces)
        await _copy(conn, "quota_usage", QUOTA_COLUMNS, prepared.quota_rows)


async def _update_gpus(conn: asyncpg.Connection, payload: str, rows: list[projection.Row]) -> None:
    status = await conn.execute(UPDATE_GPUS, payload)
    if status != f"UPDATE {len(rows)}":
        await conn.execute(_UPSERT_GPUS, *([r[c] for r in rows] for c in GPU_COLUMNS))


def _json(rows: list[projection.Row]) -> str:
    return msgspec.json.encode(rows).decode()


async def _copy(conn: asyncpg.Connection, table: str, columns: tuple[str, ...], rows: list[projection.Row]) -> None:
    """Binary COPY of ``rows`` (dicts keyed by column) into ``table``; nothing when empty."""
    if rows:
        await conn.copy_records_to_table(table, columns=columns, records=[tuple(r[c] for c in columns) for r in rows])
