"""``ix_allocations_lives``: every life of an allocation id, ended ones included.

``ix_allocations_open`` holds only the queued and granted lives, so looking up how an ended
allocation went (the API's 404 body, ``gpuledger why``, the dashboard's allocation page, SQL
queries 4 and 7) read the whole ``allocations`` table. This index on (allocation id, id) serves
those lookups in id order; an append pays one more index entry per new life.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24 18:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = '0006'
down_revision: str | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    op.create_index('ix_allocations_lives', 'allocations', ['allocation_id', 'id'], unique=False)


def downgrade() -> None:
    """Revert this revision."""
    op.drop_index('ix_allocations_lives', table_name='allocations')
