"""NVML source: the node agent (a DaemonSet pod per GPU node) reading its GPUs with nvidia-ml-py.

``read_devices(nvml)`` takes the NVML module as a parameter (``import pynvml`` in production, a
fake in unit tests) and returns :class:`GpuReading` per device: uuid (lowercased, as TensorFusion
keys GPUs), NVML name (model lookup via the table's normalisation), total memory bytes, index,
NUMA node, NVLink interconnect group and isolation capabilities (see
:mod:`services.discovery.nvml_topology`; unknown -> None / "" / ()). At most 64 devices
(TensorFusion node discovery). ``node_report`` adds the host's CPU and memory. NVML errors
other than on optional fields propagate as the module's NVMLError.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import msgspec

from events.intents import RegisterNode
from services.discovery import nvml_topology
from services.discovery.catalog import ModelTable
from services.discovery.inventory import GpuReading, ReportConfig, build_gpus, finished

MAX_DEVICES = 64
SYSFS_PCI = Path("/sys/bus/pci/devices")


def read_devices(nvml: Any, *, sysfs: Path = SYSFS_PCI) -> list[GpuReading]:
    """Init NVML, read every device (up to 64), shut NVML down. Raises ``nvml.NVMLError``.

    NUMA node, NVLink group and isolation capabilities come from :mod:`nvml_topology`; a GPU
    whose PCI info cannot be read gets no NUMA node and no group (unknown), the others are unaffected.
    """
    nvml.nvmlInit()
    try:
        readings, links = [], {}
        for i in range(min(int(nvml.nvmlDeviceGetCount()), MAX_DEVICES)):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            index = int(nvml.nvmlDeviceGetIndex(handle)) if hasattr(nvml, "nvmlDeviceGetIndex") else i
            try:
                pci_bus = nvml_topology.bus_id(nvml.nvmlDeviceGetPciInfo(handle).busId)
            except (nvml.NVMLError, AttributeError):
                pci_bus = ""
            if pci_bus:
                links[pci_bus] = nvml_topology.nvlink_remotes(nvml, handle)
            readings.append((pci_bus, GpuReading(
                model=nvml_topology.text(nvml.nvmlDeviceGetName(handle)), index=index,
                vram_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                uuid=nvml_topology.text(nvml.nvmlDeviceGetUUID(handle)).lower(),
                numa_node=nvml_topology.numa_node(nvml, handle, pci_bus, sysfs=sysfs) if pci_bus else None,
                isolation_capabilities=nvml_topology.isolation_capabilities(nvml, handle))))
        groups = nvml_topology.interconnect_groups(links)
        return [msgspec.structs.replace(r, interconnect_group=groups.get(bus, "")) for bus, r in readings]
    finally:
        nvml.nvmlShutdown()


def host_resources() -> tuple[int, int]:
    """This host's CPU (millicores, from the scheduler affinity) and RAM bytes (0 if unknown)."""
    cpu = len(os.sched_getaffinity(0)) * 1000
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        memory = 0
    return cpu, memory


def node_name() -> str:
    """The node's name: ``NODE_NAME`` (downward API ``spec.nodeName`` in the DaemonSet), else hostname."""
    return os.environ.get("NODE_NAME") or socket.gethostname()


def node_report(node: str, readings: list[GpuReading], *, table: ModelTable, config: ReportConfig,
                cpu_milli: int = 0, memory_bytes: int = 0) -> RegisterNode:
    """The RegisterNode for this host's GPUs (pool from ``config.pool``); raises
    :class:`events.bounds.BoundsError` when a reading is beyond the contract's bounds."""
    intent = RegisterNode(
        intent_id="", node=node, pool=config.pool, gpus=build_gpus(node, readings, table=table, config=config),
        cpu_milli=cpu_milli, memory_bytes=memory_bytes, heartbeat_ttl_s=config.heartbeat_ttl_s,
        source="nvml")
    return finished(intent)


def load_nvml() -> Any:
    """Import nvidia-ml-py's ``pynvml`` (ImportError with a hint when it is not installed)."""
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - it is a declared dependency
        raise ImportError("the nvml source needs nvidia-ml-py (pip install nvidia-ml-py)") from exc
    return pynvml
