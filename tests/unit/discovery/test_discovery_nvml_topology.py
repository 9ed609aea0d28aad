"""NUMA, NVLink groups and isolation capabilities from NVML: a real H100's answers, then NVLink boxes.

The fake NVML answers like nvidia-ml-py (function names, error class with ``value``, constants);
its first device replays the NVML capture of an H100 80GB HBM3 (driver 580.159.04) copied into
tests/fixtures/nvml_h100_80gb_hbm3.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from events import codec
from services.discovery import nvml, nvml_topology
from services.discovery.catalog import ModelTable
from services.discovery.inventory import ReportConfig

CAPTURE = json.loads((Path(__file__).parents[2] / "fixtures" / "nvml_h100_80gb_hbm3.json").read_text())
NOT_SUPPORTED, INVALID_ARGUMENT = 3, 2


class NVMLError(Exception):
    """nvidia-ml-py's error: ``value`` is the NVML return code."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


class FakeNvml:
    """Devices are dicts: name, uuid, memory, bus, affinity (mask words or None: NotSupported),
    links (remote bus ids of enabled NVLinks, or None: NotSupported), mig (bool or None: NotSupported)."""

    NVMLError = NVMLError
    NVML_AFFINITY_SCOPE_NODE = 0
    NVML_FEATURE_ENABLED = 1
    NVML_ERROR_NOT_SUPPORTED = NOT_SUPPORTED

    def __init__(self, devices: list[dict[str, Any]]) -> None:
        self.devices = devices

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> dict[str, Any]:
        return self.devices[i]

    def nvmlDeviceGetName(self, h: dict[str, Any]) -> str:
        return str(h["name"])

    def nvmlDeviceGetUUID(self, h: dict[str, Any]) -> str:
        return str(h["uuid"])

    def nvmlDeviceGetMemoryInfo(self, h: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(total=h["memory"])

    def nvmlDeviceGetPciInfo(self, h: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(busId=h["bus"].encode())

    def nvmlDeviceGetNumaNodeId(self, h: dict[str, Any]) -> int:
        raise NVMLError(NOT_SUPPORTED)  # as on the captured H100; discovery must not rely on it

    def nvmlDeviceGetMemoryAffinity(self, h: dict[str, Any], words: int, scope: int) -> list[int]:
        assert scope == self.NVML_AFFINITY_SCOPE_NODE
        if h.get("affinity") is None:
            raise NVMLError(NOT_SUPPORTED)
        return (list(h["affinity"]) + [0] * words)[:words]

    def nvmlDeviceGetNvLinkState(self, h: dict[str, Any], link: int) -> int:
        if h.get("links") is None:
            raise NVMLError(NOT_SUPPORTED)
        if link >= 18:
            raise NVMLError(INVALID_ARGUMENT)
        return 1 if link < len(h["links"]) else 0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: dict[str, Any], link: int) -> SimpleNamespace:
        return SimpleNamespace(busId=h["links"][link].encode())

    def nvmlDeviceGetMigMode(self, h: dict[str, Any]) -> list[int]:
        if h.get("mig") is None:
            raise NVMLError(NOT_SUPPORTED)
        return [int(h["mig"]), int(h["mig"])]


def captured_h100() -> dict[str, Any]:
    device = CAPTURE["device"]
    return {"name": device["name"], "uuid": device["uuid"], "memory": device["memory_total_bytes"],
            "bus": device["pci_bus_id"], "affinity": CAPTURE["numa"]["memory_affinity_node_scope"],
            "links": None, "mig": bool(device["mig_mode_current_pending"][0])}


def sysfs_with(tmp_path: Path, bus: str, node: int) -> Path:
    (tmp_path / bus).mkdir(parents=True, exist_ok=True)
    (tmp_path / bus / "numa_node").write_text(f"{node}\n")
    return tmp_path


def test_the_captured_h100_reads_numa_0_no_nvlink_group_and_every_isolation_mode(tmp_path: Path) -> None:
    # sysfs says -1 there, NumaNodeId NotSupported: only the memory affinity knows node 0
    sysfs = sysfs_with(tmp_path, "0000:00:06.0", -1)
    (reading,) = nvml.read_devices(FakeNvml([captured_h100()]), sysfs=sysfs)
    assert (reading.numa_node, reading.interconnect_group) == (0, "")
    assert reading.isolation_capabilities == ("shared", "soft", "hard", "partitioned")
    intent = nvml.node_report("h100-host", [reading], table=ModelTable.load(),
                              config=ReportConfig(pool="p", source="nvml"))
    gpu = intent.gpus[0]
    assert (gpu.model, gpu.numa_node, gpu.isolation_capabilities) == ("H100_SXM", 0, reading.isolation_capabilities)
    assert codec.decode_intent(codec.encode(intent)) == intent


@pytest.mark.parametrize(("mask", "sysfs_node", "expected"), [
    ([0b10], 0, 1),              # the mask wins over sysfs
    ([0, 1], None, 64),          # a node in the second 64-bit word
    ([0b11], 0, None),           # a GPU near two nodes: unknown, not a guess
    ([0], 1, 1),                 # an empty mask: fall back to sysfs
    (None, 1, 1),                # NotSupported: fall back to sysfs
    (None, None, None),          # nothing knows
])
def test_numa_node_from_the_memory_affinity_mask(tmp_path: Path, mask: list[int] | None,
                                                 sysfs_node: int | None, expected: int | None) -> None:
    if sysfs_node is not None:
        sysfs_with(tmp_path, "0000:00:06.0", sysfs_node)
    device = {**captured_h100(), "affinity": mask}
    assert nvml.read_devices(FakeNvml([device]), sysfs=tmp_path)[0].numa_node == expected


def _box(buses: list[str], links: dict[int, list[str]]) -> list[dict[str, Any]]:
    return [{**captured_h100(), "uuid": f"GPU-{i}", "bus": f"00000000:{bus}", "links": links.get(i, []), "mig": False}
            for i, bus in enumerate(buses)]


def test_nvlink_bridged_pairs_form_two_groups_named_by_their_smallest_bus_id() -> None:
    buses = ["1B:00.0", "18:00.0", "9A:00.0", "A0:00.0", "C0:00.0"]
    pairs = {0: ["0000:18:00.0"] * 3, 1: ["0000:1b:00.0"] * 3, 2: ["0000:a0:00.0"], 3: ["0000:9a:00.0"]}
    readings = nvml.read_devices(FakeNvml(_box(buses, pairs)))
    assert [r.interconnect_group for r in readings] == [
        "0000:18:00.0", "0000:18:00.0", "0000:9a:00.0", "0000:9a:00.0", ""]
    assert all(r.isolation_capabilities == ("shared", "soft", "hard", "partitioned") for r in readings)


def test_gpus_behind_the_same_nvswitches_are_one_group_named_by_a_gpu_not_a_switch() -> None:
    buses = [f"{b:02X}:00.0" for b in (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)]
    switches = ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]
    links = {i: [switches[link % 4] for link in range(18)] for i in range(8)}
    readings = nvml.read_devices(FakeNvml(_box(buses, links)))
    assert {r.interconnect_group for r in readings} == {"0000:18:00.0"}


def test_a_gpu_without_mig_cannot_be_partitioned_and_an_old_nvml_leaves_capabilities_unknown() -> None:
    fake = FakeNvml([{**captured_h100(), "name": "NVIDIA L4", "mig": None}])
    assert nvml.read_devices(fake)[0].isolation_capabilities == ("shared", "soft", "hard")
    fake.nvmlDeviceGetMigMode = None  # type: ignore[assignment,method-assign]
    assert nvml.read_devices(fake)[0].isolation_capabilities == ()


def test_an_unexpected_mig_error_is_unknown_not_a_claim() -> None:
    fake = FakeNvml([captured_h100()])

    def lost(h: dict[str, Any]) -> list[int]:
        raise NVMLError(15)  # NVML_ERROR_GPU_IS_LOST

    fake.nvmlDeviceGetMigMode = lost  # type: ignore[method-assign]
    assert nvml.read_devices(fake)[0].isolation_capabilities == ()


def test_interconnect_groups_ignore_gpus_that_only_reach_themselves() -> None:
    assert nvml_topology.interconnect_groups({"a": ["a"], "b": [], "c": ["s"], "d": ["s"]}) == {
        "a": "", "b": "", "c": "c", "d": "c"}


def test_a_gpu_without_pci_info_has_no_numa_or_group_and_its_peer_is_unaffected() -> None:
    devices = _box(["18:00.0", "1B:00.0", "2A:00.0"], {0: ["0000:1b:00.0"], 1: ["0000:18:00.0"]})
    devices[2]["bus"] = None  # nvmlDeviceGetPciInfo fails for this one
    fake = FakeNvml(devices)
    original = fake.nvmlDeviceGetPciInfo

    def pci(h: dict[str, Any]) -> SimpleNamespace:
        if h["bus"] is None:
            raise NVMLError(NOT_SUPPORTED)
        return original(h)

    fake.nvmlDeviceGetPciInfo = pci  # type: ignore[method-assign]
    readings = nvml.read_devices(fake, sysfs=Path("/nonexistent"))
    assert [(r.numa_node, r.interconnect_group) for r in readings] == [
        (0, "0000:18:00.0"), (0, "0000:18:00.0"), (None, "")]
    assert readings[2].isolation_capabilities == ("shared", "soft", "hard", "partitioned")
