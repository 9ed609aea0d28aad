"""LeaseStore contract: take, renew, refuse, expire, release; the epoch only grows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.contract.conftest import Backend

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


async def test_first_taker_gets_epoch_one_and_others_are_refused_while_it_lives(backend: Backend) -> None:
    lease = await backend.leases.acquire("allocator", holder="a", ttl_s=5, now=NOW)
    assert (lease.holder, lease.epoch, lease.expires_at) == ("a", 1, NOW + timedelta(seconds=5))
    assert await backend.leases.acquire("allocator", holder="b", ttl_s=5, now=NOW + timedelta(seconds=4)) is None


async def test_renewal_keeps_the_epoch_and_extends_expiry(backend: Backend) -> None:
    await backend.leases.acquire("allocator", holder="a", ttl_s=5, now=NOW)
    renewed = await backend.leases.acquire("allocator", holder="a", ttl_s=5, now=NOW + timedelta(seconds=3))
    assert renewed.epoch == 1 and renewed.expires_at == NOW + timedelta(seconds=8)


async def test_an_expired_lease_goes_to_the_next_taker_with_a_higher_epoch(backend: Backend) -> None:
    await backend.leases.acquire("allocator", holder="a", ttl_s=5, now=NOW)
    taken = await backend.leases.acquire("allocator", holder="b", ttl_s=5, now=NOW + timedelta(seconds=5))
    assert (taken.holder, taken.epoch) == ("b", 2)
    assert await backend.leases.acquire("allocator", holder="a", ttl_s=5, now=NOW + timedelta(seconds=6)) is None


async def test_release_frees_the_lease_at_once_and_only_for_its_holder(backend: Backend) -> None:
    await backend.leases.acquire("allocator", holder="a", ttl_s=60, now=NOW)
    await backend.leases.release("allocator", holder="b")
    assert await backend.leases.acquire("allocator", holder="b", ttl_s=5, now=NOW) is None
    await backend.leases.release("allocator", holder="a")
    taken = await backend.leases.acquire("allocator", holder="b", ttl_s=5, now=NOW)
    assert (taken.holder, taken.epoch) == ("b", 2)


async def test_leases_are_independent_by_name(backend: Backend) -> None:
    first = await backend.leases.acquire("pool-a", holder="a", ttl_s=5, now=NOW)
    second = await backend.leases.acquire("pool-b", holder="b", ttl_s=5, now=NOW)
    assert first.epoch == second.epoch == 1


async def test_a_live_holder_identity_is_refused_to_a_caller_that_does_not_hold_it(backend: Backend) -> None:
    await backend.leases.acquire("allocator", holder="a", ttl_s=5, now=NOW)
    assert await backend.leases.acquire("allocator", holder="a", ttl_s=5, now=NOW + timedelta(seconds=1),
                                        renew=False) is None
    taken = await backend.leases.acquire("allocator", holder="a", ttl_s=5, now=NOW + timedelta(seconds=5),
                                         renew=False)
    assert taken is not None and taken.epoch == 2  # once expired, taken afresh: a new epoch
