"""Heartbeats re-send the current reports with fresh ids; settings resolve the TTL and reject bad values."""

from __future__ import annotations

import asyncio
import contextlib

import msgspec
import pytest

from events.base import Intent
from events.intents import RegisterNode
from services.discovery import settings
from services.discovery.heartbeat import Inventory, beat_once, heartbeat_loop
from services.shared.settings import SettingsError


def node(name: str) -> RegisterNode:
    return RegisterNode(intent_id=f"register:{name}:x", node=name, pool="p", heartbeat_ttl_s=3.0)


async def test_beat_resends_every_report_with_a_fresh_id() -> None:
    inventory, sent = Inventory(), []  # type: Inventory, list[Intent]
    for name in ("b", "a"):
        inventory.put(node(name))

    async def publish(intent: Intent) -> None:
        sent.append(intent)

    assert await beat_once(inventory, publish) == 2
    await beat_once(inventory, publish)
    assert [i.node for i in sent if isinstance(i, RegisterNode)] == ["a", "b", "a", "b"]
    assert len({i.intent_id for i in sent}) == 4
    assert all(msgspec.structs.replace(i, intent_id="") == msgspec.structs.replace(node(i.node), intent_id="")
               for i in sent if isinstance(i, RegisterNode))


async def test_loop_survives_a_failing_publish() -> None:
    inventory, attempts, done = Inventory(), [], asyncio.Event()  # type: Inventory, list[str], asyncio.Event
    inventory.put(node("a"))

    async def flaky(intent: Intent) -> None:
        attempts.append(intent.intent_id)
        if len(attempts) == 1:
            raise ConnectionError("NATS away")
        done.set()

    task = asyncio.create_task(heartbeat_loop(inventory, flaky, interval_s=0.01))
    await asyncio.wait_for(done.wait(), 30)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert len(attempts) >= 2


async def test_loop_rejects_a_non_positive_interval() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        await heartbeat_loop(Inventory(), lambda i: asyncio.sleep(0), interval_s=0)


def test_ttl_defaults_to_three_intervals_and_is_zero_without_heartbeats() -> None:
    assert settings.load(environ={}, heartbeat_interval_s=10).report_config().heartbeat_ttl_s == 30
    assert settings.load(environ={}, heartbeat_interval_s=10, heartbeat_ttl_s=5).report_config().heartbeat_ttl_s == 5
    assert settings.load(environ={}, heartbeat_interval_s=0).report_config().heartbeat_ttl_s == 0


def test_environment_is_read_with_the_shared_nats_url_as_fallback() -> None:
    env = {"GPULEDGER_NATS_URL": "nats://shared:4222", "GPULEDGER_DISCOVERY_SOURCE": "static",
           "GPULEDGER_DISCOVERY_FILE": "x.yaml", "GPULEDGER_DISCOVERY_DEFAULT_TFLOPS": "50"}
    loaded = settings.load(environ=env)
    assert (loaded.source, loaded.file, loaded.nats_url) == ("static", "x.yaml", "nats://shared:4222")
    assert loaded.report_config().default_milli_tflops == 50_000
    own = settings.load(environ={**env, "GPULEDGER_DISCOVERY_NATS_URL": "nats://own:4222"})
    assert own.nats_url == "nats://own:4222"


@pytest.mark.parametrize(("env", "name"), [
    ({"GPULEDGER_DISCOVERY_SOURCE": "dns"}, "source"),
    ({"GPULEDGER_DISCOVERY_SOURCE": "static"}, "file"),
    ({"GPULEDGER_DISCOVERY_DEFAULT_VRAM": "huge"}, "default_vram"),
    ({"GPULEDGER_DISCOVERY_HEARTBEAT_INTERVAL_S": "soon"}, "heartbeat_interval_s"),
])
def test_bad_settings_name_the_field(env: dict[str, str], name: str) -> None:
    with pytest.raises(SettingsError, match=name):
        settings.load(environ=env)
