"""Event log, lease and read models: every table of services/allocator/adapters/tables.py.

Revision ID: 0001
Revises: 
Create Date: 2026-11-21 05:49:01.742045
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0001'
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    op.create_table('allocations',
    sa.Column('id', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('allocation_id', sa.Text(), nullable=False),
    sa.Column('namespace', sa.Text(), nullable=False),
    sa.Column('pod', sa.Text(), nullable=False),
    sa.Column('workload', sa.Text(), nullable=False),
    sa.Column('pool', sa.Text(), nullable=False),
    sa.Column('qos', sa.Text(), nullable=False),
    sa.Column('gpu_count', sa.Integer(), nullable=False),
    sa.Column('request_milli_tflops', sa.BigInteger(), nullable=False),
    sa.Column('request_vram_bytes', sa.BigInteger(), nullable=False),
    sa.Column('request_compute_milli_percent', sa.BigInteger(), nullable=False),
    sa.Column('limit_milli_tflops', sa.BigInteger(), nullable=False),
    sa.Column('limit_vram_bytes', sa.BigInteger(), nullable=False),
    sa.Column('status', sa.Text(), nullable=False),
    sa.Column('node', sa.Text(), nullable=True),
    sa.Column('gpus', sa.ARRAY(sa.Text()), nullable=False),
    sa.Column('requested_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('queued_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('granted_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('resized_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('released_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('resize_count', sa.Integer(), nullable=False),
    sa.Column('from_queue', sa.Boolean(), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('code', sa.Text(), nullable=False),
    sa.Column('quota_dimension', sa.Text(), nullable=False),
    sa.Column('release_reason', sa.Text(), nullable=False),
    sa.Column('last_position', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_allocations_namespace_requested', 'allocations', ['namespace', 'requested_at'], unique=False)
    op.create_index('ix_allocations_node_granted', 'allocations', ['node', 'granted_at'], unique=False)
    op.create_index('ix_allocations_open', 'allocations', ['allocation_id'], unique=True, postgresql_where=sa.text("status IN ('queued', 'granted')"))
    op.create_index('ix_allocations_pod', 'allocations', ['pod'], unique=False)
    op.create_table('events',
    sa.Column('position', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('recorded_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('epoch', sa.BigInteger(), nullable=False),
    sa.Column('intent_id', sa.Text(), nullable=False),
    sa.Column('type', sa.Text(), nullable=False),
    sa.Column('data', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.PrimaryKeyConstraint('position')
    )
    op.create_index('ix_events_type', 'events', ['type', 'position'], unique=False)
    op.create_table('gpus',
    sa.Column('name', sa.Text(), nullable=False),
    sa.Column('node', sa.Text(), nullable=False),
    sa.Column('pool', sa.Text(), nullable=False),
    sa.Column('model', sa.Text(), nullable=False),
    sa.Column('phase', sa.Text(), nullable=False),
    sa.Column('capacity_milli_tflops', sa.BigInteger(), nullable=False),
    sa.Column('capacity_vram_bytes', sa.BigInteger(), nullable=False),
    sa.Column('used_milli_tflops', sa.BigInteger(), nullable=False),
    sa.Column('used_vram_bytes', sa.BigInteger(), nullable=False),
    sa.Column('available_milli_tflops', sa.BigInteger(), nullable=False),
    sa.Column('available_vram_bytes', sa.BigInteger(), nullable=False),
    sa.Column('allocations', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('name'),
    postgresql_with={'fillfactor': '50'},
    )
    op.create_index('ix_gpus_node', 'gpus', ['node'], unique=False)
    op.create_index('ix_gpus_pool_model', 'gpus', ['pool', 'model'], unique=False)
    op.create_table('leases',
    sa.Column('name', sa.Text(), nullable=False),
    sa.Column('holder', sa.Text(), nullable=False),
    sa.Column('epoch', sa.BigInteger(), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('processed_intents',
    sa.Column('intent_id', sa.Text(), nullable=False),
    sa.Column('stream_seq', sa.BigInteger(), nullable=False),
    sa.Column('position', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('intent_id')
    )
    op.create_table('quota_usage',
    sa.Column('namespace', sa.Text(), nullable=False),
    sa.Column('requests_milli_tflops', sa.BigInteger(), nullable=False),
    sa.Column('requests_vram_bytes', sa.BigInteger(), nullable=False),
    sa.Column('limits_milli_tflops', sa.BigInteger(), nullable=False),
    sa.Column('limits_vram_bytes', sa.BigInteger(), nullable=False),
    sa.Column('workers', sa.Integer(), nullable=False),
    sa.Column('quota_requests_milli_tflops', sa.BigInteger(), nullable=True),
    sa.Column('quota_requests_vram_bytes', sa.BigInteger(), nullable=True),
    sa.PrimaryKeyConstraint('namespace'),
    postgresql_with={'fillfactor': '50'},
    )
    op.create_table('snapshots',
    sa.Column('position', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('state', sa.LargeBinary(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('position')
    )


def downgrade() -> None:
    """Revert this revision."""
    op.drop_table('snapshots')
    op.drop_table('quota_usage')
    op.drop_table('processed_intents')
    op.drop_table('leases')
    op.drop_index('ix_gpus_pool_model', table_name='gpus')
    op.drop_index('ix_gpus_node', table_name='gpus')
    op.drop_table('gpus')
    op.drop_index('ix_events_type', table_name='events')
    op.drop_table('events')
    op.drop_index('ix_allocations_pod', table_name='allocations')
    op.drop_index('ix_allocations_open', table_name='allocations', postgresql_where=sa.text("status IN ('queued', 'granted')"))
    op.drop_index('ix_allocations_node_granted', table_name='allocations')
    op.drop_index('ix_allocations_namespace_requested', table_name='allocations')
    op.drop_table('allocations')
