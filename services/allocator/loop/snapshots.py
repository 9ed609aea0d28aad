"""When the leader saves a snapshot of its projection: every N events since the last one."""

from __future__ import annotations


class SnapshotPolicy:
    """Says when a snapshot is due: after ``every`` events since the last one (0: never).

    Example: ``policy = SnapshotPolicy(every=20_000, last=state.position)``; after each append
    ``if policy.due(state.position): await store.save_snapshot(state); policy.saved(state.position)``.
    """

    def __init__(self, *, every: int, last: int = 0) -> None:
        if every < 0:
            raise ValueError(f"snapshot_every must be >= 0, got {every}")
        self.every = every
        self.last = last

    def due(self, position: int) -> bool:
        """True when ``position`` is at least ``every`` events past the last snapshot."""
        return self.every > 0 and position - self.last >= self.every

    def saved(self, position: int) -> None:
        """Record that a snapshot was stored at ``position``."""
        self.last = position
