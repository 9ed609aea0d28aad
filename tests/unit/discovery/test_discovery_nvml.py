"""The NVML agent against a fake NVML module (same function names and error class as nvidia-ml-py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from events.base import Intent
from events.intents import RegisterNode
from events.values import Resources
from services.discovery import nvml, settings, wiring
from services.discovery.catalog import ModelTable
from services.discovery.inventory import ReportConfig

TABLE = ModelTable.load()
GiB = 2**30


class FakeNvml:
    """A stand-in for ``pynvml``: devices are dicts; calls are recorded."""

    class NVMLError(Exception):
        pass

    def __init__(self, devices: list[dict[str, Any]], *, numa_api: bool = True) -> None:
        self.devices = devices
        self.calls: list[str] = []
        if not numa_api:
            self.nvmlDeviceGetMemoryAffinity = None

    def nvmlInit(self) -> None:
        self.calls.append("init")

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> dict[str, Any]:
        return self.devices[i]

    def nvmlDeviceGetIndex(self, h: dict[str, Any]) -> int:
        return int(h.get("index", self.devices.index(h)))

    def nvmlDeviceGetName(self, h: dict[str, Any]) -> Any:
        if h.get("fail"):
            raise self.NVMLError("GPU is lost")
        return h["name"]

    def nvmlDeviceGetUUID(self, h: dict[str, Any]) -> Any:
        return h["uuid"]

    def nvmlDeviceGetMemoryInfo(self, h: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(total=h["memory"], free=h["memory"], used=0)

    def nvmlDeviceGetMemoryAffinity(self, h: dict[str, Any], words: int, scope: int) -> list[int]:
        if "numa" not in h:
            raise self.NVMLError("Not Supported")
        return [1 << int(h["numa"]) if int(h["numa"]) >= 0 else 0] + [0] * (words - 1)

    def nvmlDeviceGetPciInfo(self, h: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(busId=h.get("bus", b"00000000:3B:00.0"))


H100 = {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-ABC-0", "memory": 81559 * 2**20, "numa": 0}


def test_devices_are_read_with_lowercase_uuid_and_numa() -> None:
    fake = FakeNvml([H100, {**H100, "name": b"NVIDIA H100 80GB HBM3", "uuid": b"GPU-ABC-1", "numa": -1}])
    readings = nvml.read_devices(fake)
    assert [(r.index, r.uuid, r.numa_node, r.vram_bytes) for r in readings] == [
        (0, "gpu-abc-0", 0, 81559 * 2**20), (1, "gpu-abc-1", None, 81559 * 2**20)]
    assert fake.calls == ["init", "shutdown"]


def test_numa_falls_back_to_sysfs_of_the_pci_device(tmp_path: Path) -> None:
    (tmp_path / "0000:3b:00.0").mkdir()
    (tmp_path / "0000:3b:00.0" / "numa_node").write_text("1\n")
    device = {k: v for k, v in H100.items() if k != "numa"}
    assert nvml.read_devices(FakeNvml([device], numa_api=False), sysfs=tmp_path)[0].numa_node == 1
    assert nvml.read_devices(FakeNvml([{**device, "bus": "0000:AA:00.0"}]), sysfs=tmp_path)[0].numa_node is None


def test_nvml_error_propagates_and_nvml_is_shut_down() -> None:
    fake = FakeNvml([{**H100, "fail": True}])
    with pytest.raises(FakeNvml.NVMLError):
        nvml.read_devices(fake)
    assert fake.calls == ["init", "shutdown"]


def test_at_most_64_devices_are_read() -> None:
    devices = [{**H100, "uuid": f"GPU-{i}", "index": i} for i in range(70)]
    assert len(nvml.read_devices(FakeNvml(devices))) == 64


def test_report_uses_the_model_table_by_nvml_name_and_measured_memory() -> None:
    readings = nvml.read_devices(FakeNvml([H100, {**H100, "name": "NVIDIA Mystery", "uuid": "GPU-X"}]))
    config = ReportConfig(pool="p", default_milli_tflops=1_000, heartbeat_ttl_s=30, source="nvml")
    intent = nvml.node_report("gpu-host", readings, table=TABLE, config=config, cpu_milli=8000, memory_bytes=GiB)
    known, unknown = intent.gpus
    assert (known.name, known.model, known.capacity) == (
        "gpu-host-gpu-0", "H100_SXM", Resources(milli_tflops=989_000, vram_bytes=81559 * 2**20))
    assert (unknown.model, unknown.capacity.milli_tflops, unknown.uuid) == ("NVIDIA Mystery", 1_000, "gpu-x")
    assert (intent.pool, intent.source, intent.heartbeat_ttl_s, intent.cpu_milli) == ("p", "nvml", 30, 8000)


def test_host_resources_and_node_name(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu, memory = nvml.host_resources()
    assert cpu >= 1000 and cpu % 1000 == 0 and memory > 0
    monkeypatch.setenv("NODE_NAME", "from-downward-api")
    assert nvml.node_name() == "from-downward-api"


async def test_agent_reports_once_then_heartbeats_and_reports_a_lost_gpu() -> None:
    fake = FakeNvml([H100, {**H100, "uuid": "GPU-ABC-1"}])
    sent: list[Intent] = []
    beats = asyncio.Event()

    async def publish(intent: Intent) -> None:
        sent.append(intent)
        if len(sent) == 2:
            fake.devices.pop()  # a GPU falls off the bus before the next re-read
        if len(sent) >= 4:
            beats.set()

    config = settings.load(environ={}, source="nvml", node_name="n1", heartbeat_interval_s=0.01)
    stop = asyncio.Event()
    task = asyncio.create_task(wiring.run_discovery(config, publish=publish, stop=stop, nvml_module=fake))
    await asyncio.wait_for(beats.wait(), 30)
    stop.set()
    await asyncio.wait_for(task, 30)
    reports = [i for i in sent if isinstance(i, RegisterNode)]
    assert [len(r.gpus) for r in reports[:3]] == [2, 2, 1]
    assert len({r.intent_id for r in reports}) == len(reports)  # every heartbeat is a new intent
    assert all(r.heartbeat_ttl_s == 0.03 for r in reports)
