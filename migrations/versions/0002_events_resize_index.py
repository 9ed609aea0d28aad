"""Replace ``ix_events_type`` (every event) by ``ix_events_resize`` (resize events only).

Appends stop maintaining a second index entry for every event (about 1 ms of each 512-event
append, BENCHMARKS.md). The SQL history finds an allocation's queued/rejected decision through
``allocations`` (its ``id`` is that event's position) and its resizes through the partial index
``ix_events_resize`` (allocation id, position), which only resize events enter.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21 08:15:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0002'
down_revision: str | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    op.drop_index('ix_events_type', table_name='events')
    op.create_index('ix_events_resize', 'events', [sa.text("(data ->> 'allocation_id')"), 'position'],
                    postgresql_where=sa.text("type IN ('allocation_resized', 'resize_rejected')"))


def downgrade() -> None:
    """Revert this revision."""
    op.drop_index('ix_events_resize', table_name='events')
    op.create_index('ix_events_type', 'events', ['type', 'position'], unique=False)
