"""Gang history: ``ix_events_gang`` and the views ``gang_placements``, ``gang_events``, ``allocation_gangs``.

One row per gang placement (the ``gang_placed`` event: the quorum placed in one decision), every
gang fact (placed, timed out, degraded) and the gang key of each allocation life (read from the
event that started the life, whose ``spec`` carries the gang). Views over the log: nothing is
written on append except the partial index entries of the (rare) gang events.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 15:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0005'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GANG_TYPES = "type IN ('gang_placed', 'gang_timed_out', 'gang_degraded')"

VIEWS = {
    "gang_placements": """
SELECT e.position, (e.data ->> 'at')::timestamptz AS placed_at, e.data ->> 'key' AS gang_key,
       e.data ->> 'namespace' AS namespace, e.data ->> 'pool' AS pool, (e.data ->> 'quorum')::int AS quorum,
       (e.data ->> 'placed')::int AS placed,
       ARRAY(SELECT jsonb_array_elements_text(coalesce(e.data -> 'nodes', '[]'::jsonb))) AS nodes
FROM events e WHERE e.type = 'gang_placed'""",
    "gang_events": """
SELECT e.position, (e.data ->> 'at')::timestamptz AS at, e.type, e.data ->> 'key' AS gang_key,
       e.data ->> 'namespace' AS namespace, (e.data ->> 'quorum')::int AS quorum,
       coalesce((e.data ->> 'placed')::int, (e.data ->> 'present')::int, (e.data ->> 'members')::int, 0) AS members,
       coalesce(e.data ->> 'reason', e.data ->> 'allocation_id', '') AS detail
FROM events e WHERE """ + GANG_TYPES,
    "allocation_gangs": """
SELECT a.id, a.allocation_id, a.namespace, a.pod, a.status, a.node, a.granted_at, a.released_at,
       e.data -> 'spec' -> 'gang' ->> 'key' AS gang_key, (e.data -> 'spec' -> 'gang' ->> 'quorum')::int AS quorum
FROM allocations a JOIN events e ON e.position = a.id
WHERE e.data -> 'spec' ? 'gang'""",
}


def upgrade() -> None:
    """Apply this revision."""
    op.create_index('ix_events_gang', 'events', [sa.text("(data ->> 'key')"), 'position'],
                    postgresql_where=sa.text(GANG_TYPES))
    for name, body in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {body}")


def downgrade() -> None:
    """Revert this revision."""
    for name in VIEWS:
        op.execute(f"DROP VIEW IF EXISTS {name}")
    op.drop_index('ix_events_gang', table_name='events')
