"""Add ``allocations.preempted_by``: the preemptor of a life that ended in preemption.

A preempted allocation's life closes with status ``preempted`` and the allocation id of the
request that took its GPUs (issue 16); NULL for every other life.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24 15:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0004'
down_revision: str | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    op.add_column('allocations', sa.Column('preempted_by', sa.Text(), nullable=True))


def downgrade() -> None:
    """Revert this revision."""
    op.drop_column('allocations', 'preempted_by')
