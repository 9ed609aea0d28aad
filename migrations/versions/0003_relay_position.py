"""Add ``relay_position``: the relay's own record of the last log position it published.

The relay used to resume from the last message of GPULEDGER_EVENTS, which any client able to
write to that stream could forge (a ``Nats-Msg-Id`` beyond the log stopped every new leader, a
message without headers republished the whole log). Now it resumes from this row, written after
each acknowledged publish.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24 12:45:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0003'
down_revision: str | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    op.create_table('relay_position',
    sa.Column('name', sa.Text(), nullable=False),
    sa.Column('position', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )


def downgrade() -> None:
    """Revert this revision."""
    op.drop_table('relay_position')
