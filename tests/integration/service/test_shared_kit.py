"""The shared kit of the service area: lifecycle supervision and teardown, the lease keeper on the
in-memory lease twin, the nats-server wrapper, endpoint resolution, settings validation."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import msgspec
import nats
import pytest

from events import subjects
from services.allocator.adapters.leader import LeaseKeeper
from services.allocator.adapters.memory import InMemoryLeaseStore
from services.allocator.settings import AllocatorSettings
from services.allocator.settings import load as load_settings
from services.cli import endpoints
from services.shared import lifecycle, messaging
from services.shared.natsserver import NatsServer
from services.shared.settings import SettingsError


async def test_supervise_returns_when_stop_is_set_and_cancels_the_tasks() -> None:
    stop, cancelled = asyncio.Event(), []

    async def forever(name: str) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(name)
            raise

    asyncio.get_running_loop().call_later(0.05, stop.set)
    await lifecycle.supervise(stop, forever("a"), forever("b"))
    assert sorted(cancelled) == ["a", "b"]


async def test_supervise_surfaces_a_crash_and_cancels_the_rest() -> None:
    async def crash() -> None:
        raise RuntimeError("boom")

    with pytest.raises(ExceptionGroup) as caught:
        await lifecycle.supervise(asyncio.Event(), crash(), asyncio.Event().wait())
    assert caught.group_contains(RuntimeError, match="boom")


async def test_teardown_runs_newest_first_even_when_one_closer_fails() -> None:
    order: list[str] = []

    async def close(name: str) -> None:
        order.append(name)
        if name == "middle":
            raise OSError("already gone")

    teardown = lifecycle.Teardown()
    for name in ("first", "middle", "last"):
        teardown.push(name, lambda n=name: close(n))  # type: ignore[misc]
    await teardown.close()
    assert order == ["last", "middle", "first"]


async def test_wait_event_reports_whether_the_event_fired() -> None:
    event = asyncio.Event()
    assert await lifecycle.wait_event(event, 0.01) is False
    asyncio.get_running_loop().call_soon(event.set)
    assert await lifecycle.wait_event(event, 5) is True


async def test_one_keeper_leads_and_a_release_hands_over_with_a_new_epoch() -> None:
    leases = InMemoryLeaseStore()
    a = LeaseKeeper(leases, name="allocator", holder="a", ttl_s=5, renew_s=0.5)
    b = LeaseKeeper(leases, name="allocator", holder="b", ttl_s=5, renew_s=0.5)
    assert await a.tick() is True
    assert await b.tick() is False
    assert (a.role, b.role, a.epoch) == ("leader", "standby", 1)
    assert await a.tick() is True and a.epoch == 1  # renewal keeps the epoch
    await a.release()
    assert await b.tick() is True
    assert b.epoch == 2 and not a.is_leader


async def test_a_keeper_that_cannot_renew_stops_believing_it_leads() -> None:
    class Unreachable(InMemoryLeaseStore):
        down = False

        async def acquire(self, name: str, **kwargs: object) -> object:  # type: ignore[override]
            if self.down:
                raise ConnectionError("database down")
            return await super().acquire(name, **kwargs)  # type: ignore[arg-type]

    leases = Unreachable()
    keeper = LeaseKeeper(leases, name="allocator", holder="a", ttl_s=0.3, renew_s=0.1)
    assert await keeper.tick() is True
    leases.down = True
    await asyncio.sleep(0.25)  # past ttl - renew: the lease may have been taken by now
    assert await keeper.tick() is False
    assert keeper.epoch == 0


def test_nats_server_restarts_on_the_same_port_and_keeps_its_streams(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "nats")
    server.start()
    try:
        port = server.port

        async def create_then_count(create: bool) -> int:
            client = await nats.connect(server.url)
            try:
                js = client.jetstream()
                if create:
                    await messaging.ensure_streams(js)
                    await js.publish("gpuledger.intent.check_heartbeats", b"{}")
                info = await js.stream_info(subjects.INTENT_STREAM)
                return int(info.state.messages)
            finally:
                await client.close()

        assert asyncio.run(create_then_count(True)) == 1
        server.restart()
        assert server.port == port
        assert asyncio.run(create_then_count(False)) == 1
        server.kill()
        assert not server.running
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            pass
    finally:
        server.stop()


def test_endpoints_resolve_from_data_dir_then_environment(tmp_path: Path) -> None:
    written = endpoints.Endpoints(nats_url="nats://x:1", database_url="postgresql://y/z")
    endpoints.write(tmp_path, written)
    found = endpoints.resolve(tmp_path, {})
    assert (found.nats_url, found.database_url, found.source) == (written.nats_url, written.database_url,
                                                                  str(tmp_path / "endpoints.json"))
    from_env = endpoints.resolve(None, {"GPULEDGER_NATS_URL": "nats://e:2"})
    assert from_env.nats_url == "nats://e:2"
    with pytest.raises(endpoints.EndpointsError) as missing:
        endpoints.resolve(tmp_path / "nowhere", {})
    assert missing.value.field == "data_dir"


def test_settings_reject_a_lease_ttl_not_above_the_renew_interval() -> None:
    with pytest.raises(msgspec.ValidationError, match="lease_ttl_s"):
        AllocatorSettings(lease_ttl_s=0.5, lease_renew_s=0.5)
    with pytest.raises(SettingsError, match="batch_size"):
        load_settings({"GPULEDGER_BATCH_SIZE": "0"})
    assert load_settings({"GPULEDGER_BATCH_SIZE": "64"}).batch_size == 64


def test_a_server_left_running_on_the_store_is_replaced_not_shared(tmp_path: Path) -> None:
    orphan = NatsServer(tmp_path / "nats")
    orphan.start()
    old_pid = int(orphan.pid_path.read_text())
    successor = NatsServer(tmp_path / "nats")  # as after a kill -9 of `gpuledger up`
    successor.start()
    try:
        assert int(successor.pid_path.read_text()) != old_pid
        status = Path(f"/proc/{old_pid}/status")
        assert not status.exists() or "zombie" in status.read_text()  # stopped (our own child: unreaped)
    finally:
        successor.stop()
        orphan.kill()
