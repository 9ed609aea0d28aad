"""``replay --verify`` on a live stack: the log moves while the read models are read (liveness ticks,
decisions); verify folds the new events and reads again instead of failing the check, and still
fails when the log never holds still or a read model is wrong."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from services.allocator.adapters import projection
from services.allocator.adapters.memory import InMemoryEventStore, InMemoryLeaseStore
from services.allocator.api import verify
from services.allocator.domain.state import ClusterState
from services.allocator.ports import DecidedIntent
from tests.contract.scenario import fold_batch, story

NOW = datetime(2026, 3, 1, tzinfo=UTC)


class MovingStore(InMemoryEventStore):
    """Appends the next of ``pending`` batches each time the read models are read."""

    def __init__(self, leases: InMemoryLeaseStore, pending: list[list[DecidedIntent]], epoch: int,
                 state: ClusterState) -> None:
        super().__init__(leases)
        self.pending, self.epoch, self.state = pending, epoch, state

    async def read_models(self) -> projection.ReadModels:
        models = await super().read_models()
        if self.pending:
            batch = self.pending.pop(0)
            self.state = fold_batch(self.state, batch)
            await self.append(batch, lease="allocator", epoch=self.epoch, state=self.state)
        return models


async def _store(split: int, *, pending_each: bool = True) -> tuple[MovingStore, Any]:
    leases = InMemoryLeaseStore()
    lease = await leases.acquire("allocator", holder="a", ttl_s=10, now=NOW)
    assert lease is not None
    batches = story()
    state = fold_batch(ClusterState.empty(), batches[:split])
    later = [[b] for b in batches[split:]] if pending_each else [batches[split:]]
    store = MovingStore(leases, later, lease.epoch, state)
    await store.append(batches[:split], lease="allocator", epoch=lease.epoch, state=state)
    return store, state


async def test_events_appended_during_the_check_are_folded_and_the_check_passes() -> None:
    store, _ = await _store(len(story()) - 2)  # two more batches arrive, one per read of the read models
    report = await verify.verify(store)
    assert report.ok, report.problems
    assert report.position == await store.last_position() == report.events


async def test_a_log_that_never_holds_still_fails_naming_the_move() -> None:
    store, _ = await _store(1)  # more batches than retries
    assert len(store.pending) > verify.MOVE_RETRIES
    report = await verify.verify(store)
    assert not report.ok and any("moved" in p for p in report.problems)


async def test_a_wrong_read_model_still_fails_after_the_log_moved() -> None:
    store, _ = await _store(len(story()) - 1)
    store.gpus["n2-gpu1"] = {**store.gpus["n2-gpu1"], "model": "forged"}  # a GPU the last batch leaves alone
    report = await verify.verify(store)
    assert not report.ok and any(p.startswith("gpus") for p in report.problems), report.problems
